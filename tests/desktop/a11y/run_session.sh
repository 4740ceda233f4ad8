#!/usr/bin/env bash
# One screen-reader session, inside `xvfb-run -a dbus-run-session --`: the accessibility bus,
# the Wren window (window_app.py, with Wren's Python: $1), then the probe (atspi_probe.py,
# with Debian's Python and pyatspi) with the remaining arguments; the probe's JSON on stdout.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
python="$1"; shift
/usr/libexec/at-spi-bus-launcher --launch-immediately >/dev/null 2>&1 &
bus=$!
sleep 0.5
log="$(mktemp)"
QT_QPA_PLATFORM=xcb "$python" "$here/window_app.py" >"$log" 2>&1 &
app=$!
for _ in $(seq 1 240); do grep -q READY "$log" && break; kill -0 $app 2>/dev/null || break; sleep 0.25; done
if ! grep -q READY "$log"; then echo "the window did not start:" >&2; cat "$log" >&2; kill $app $bus 2>/dev/null; exit 3; fi
/usr/bin/python3 "$here/atspi_probe.py" "$@"
rc=$?
kill $app $bus 2>/dev/null
wait $app 2>/dev/null
exit $rc
