"""Wren's Windows icon: build/pyinstaller/wren.ico (16-256 px) from resources/desktop/wren.svg.

    .venv\\Scripts\\python packaging\\windows\\make_ico.py

Qt renders each size (packaging/make_icons.py) and writes the .ico itself: an ICO file is a
small directory of PNG images, which Windows Vista and later read.
"""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import make_icons

SIZES = (16, 24, 32, 48, 64, 128, 256)


def write_ico(pngs: list[tuple[int, bytes]], out: Path) -> None:
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = len(header) + 16 * len(pngs)
    entries, blobs = b"", b""
    for size, data in pngs:
        dim = 0 if size >= 256 else size  # 0 means 256 in an ICO entry
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(data), offset + len(blobs))
        blobs += data
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(header + entries + blobs)


def main() -> int:
    out = make_icons.ROOT / "build" / "pyinstaller" / "wren.ico"
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_icons.render(Path(tmp), sizes=SIZES)
        pngs = [(size, path.read_bytes()) for size, path in zip(SIZES, paths)]
    write_ico(pngs, out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
