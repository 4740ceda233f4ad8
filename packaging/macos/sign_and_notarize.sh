#!/usr/bin/env bash
# Sign Wren.app with the hardened runtime, notarize it with Apple and staple the ticket,
# then wrap it in a signed, notarized disk image. Runs on a Mac with Xcode's command-line
# tools; written and reviewed, not run by Wren's CI (which is Linux).
#
#   packaging/macos/sign_and_notarize.sh --icons          # Wren.icns from resources/desktop/wren.svg (before pyinstaller)
#   packaging/macos/sign_and_notarize.sh dist/Wren.app    # after pyinstaller packaging/macos/wren.spec
#
# Needs, in the environment:
#   WREN_SIGN_IDENTITY   "Developer ID Application: NAME (TEAMID)" (security find-identity -v -p codesigning)
#   WREN_NOTARY_PROFILE  a keychain profile made once with
#                        xcrun notarytool store-credentials PROFILE --apple-id ID --team-id TEAMID
# No password or key is read from this repository or written to disk by this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [ "${1:-}" = "--icons" ]; then
    # Qt renders the PNGs (packaging/make_icons.py); iconutil packs them.
    set_dir="$root/build/pyinstaller/Wren.iconset"
    rm -rf "$set_dir" && mkdir -p "$set_dir"
    "$root/.venv/bin/python" "$root/packaging/make_icons.py" "$root/build/pyinstaller/icons"
    for s in 16 32 128 256 512; do
        cp "$root/build/pyinstaller/icons/hicolor/${s}x${s}/apps/"*.png "$set_dir/icon_${s}x${s}.png"
        d=$((s * 2))
        [ $d -le 512 ] && cp "$root/build/pyinstaller/icons/hicolor/${d}x${d}/apps/"*.png "$set_dir/icon_${s}x${s}@2x.png"
    done
    iconutil -c icns -o "$root/build/pyinstaller/Wren.icns" "$set_dir"
    echo "wrote build/pyinstaller/Wren.icns"
    exit 0
fi

app="${1:?usage: sign_and_notarize.sh dist/Wren.app  (or --icons)}"
[ -d "$app/Contents/MacOS" ] || { echo "error: $app is not an app bundle" >&2; exit 2; }
: "${WREN_SIGN_IDENTITY:?set WREN_SIGN_IDENTITY to your Developer ID Application identity}"
: "${WREN_NOTARY_PROFILE:?set WREN_NOTARY_PROFILE to a notarytool keychain profile}"
entitlements="$here/entitlements.plist"
sign() {
    codesign --force --timestamp --options runtime --entitlements "$entitlements" \
        --sign "$WREN_SIGN_IDENTITY" "$@"
}

# 1. Inside out: every library and extension module, then the two programs, then the app.
#    (codesign --deep is deprecated for signing and misses files outside the usual places.)
find "$app/Contents" -type f \( -name "*.so" -o -name "*.dylib" -o -name "*.metallib" \) -print0 |
    xargs -0 -n 20 bash -c 'for f; do codesign --force --timestamp --options runtime --sign "$WREN_SIGN_IDENTITY" "$f"; done' _
find "$app/Contents/Frameworks" -type d -name "*.framework" -prune -print0 2>/dev/null |
    xargs -0 -I{} codesign --force --timestamp --options runtime --sign "$WREN_SIGN_IDENTITY" {}
sign "$app/Contents/MacOS/wren"
sign "$app/Contents/MacOS/wren-desktop"
sign "$app"
codesign --verify --strict --deep --verbose=2 "$app"

# 2. Notarize the app (as a zip), staple the ticket so Gatekeeper needs no network to check it.
zip="$(dirname "$app")/Wren.zip"
ditto -c -k --keepParent "$app" "$zip"
xcrun notarytool submit "$zip" --keychain-profile "$WREN_NOTARY_PROFILE" --wait
xcrun stapler staple "$app"
rm -f "$zip"

# 3. The disk image users download: signed, notarized and stapled as well.
version="$(/usr/libexec/PlistBuddy -c 'Print CFBundleShortVersionString' "$app/Contents/Info.plist")"
dmg="$(dirname "$app")/Wren-$version-arm64.dmg"
rm -f "$dmg"
hdiutil create -volname Wren -srcfolder "$app" -ov -format UDZO "$dmg"
codesign --force --timestamp --sign "$WREN_SIGN_IDENTITY" "$dmg"
xcrun notarytool submit "$dmg" --keychain-profile "$WREN_NOTARY_PROFILE" --wait
xcrun stapler staple "$dmg"
spctl --assess --type open --context context:primary-signature --verbose "$dmg"
spctl --assess --type execute --verbose "$app"
echo "signed and notarized: $dmg"
