#!/usr/bin/env bash
# Installs the Debian packages in tests/system/packages.txt that are missing. Best effort:
# without root or apt-get it says so and does nothing (the tests that need them skip).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
wanted=$(grep -v '^\s*#' "$here/packages.txt" | awk '{print $1}' | grep -v '^$' || true)
[ -z "$wanted" ] && exit 0
missing=""
for p in $wanted; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "note: the tests that need these Debian packages will skip:$missing (install them as root)"
    exit 0
fi
echo "installing Debian packages for the tests:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1 \
    || echo "note: apt-get could not install some of:$missing (the tests that need them will skip)"
exit 0
