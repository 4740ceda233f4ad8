"""Render Wren's icon (resources/desktop/wren.svg) at the freedesktop hicolor sizes.

    .venv/bin/python packaging/make_icons.py OUT_DIR [--id APP_ID]

writes OUT_DIR/hicolor/NxN/apps/APP_ID.png for each size in SIZES and
OUT_DIR/hicolor/scalable/apps/APP_ID.svg (the source itself), ready to copy under
/usr/share/icons or ~/.local/share/icons. Qt's SVG renderer draws them, offscreen, so the
build needs no display and no other tool. `make package` runs it into dist/icons.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "resources" / "desktop" / "wren.svg"
APP_ID = "io.github.wren_assistant.Wren"
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def render(out_dir: Path, app_id: str = APP_ID, source: Path = SOURCE, sizes=SIZES) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    if not source.is_file():
        raise FileNotFoundError(f"the icon source {source} does not exist")
    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])  # QImage painting needs one
    renderer = QSvgRenderer(str(source))
    if not renderer.isValid():
        raise ValueError(f"{source} is not an SVG file Qt can draw")
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        path = out_dir / "hicolor" / f"{size}x{size}" / "apps" / f"{app_id}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not image.save(str(path)):  # PNG, from the suffix
            raise OSError(f"could not write {path}")
        written.append(path)
    scalable = out_dir / "hicolor" / "scalable" / "apps" / f"{app_id}.svg"
    scalable.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, scalable)
    written.append(scalable)
    del app
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--id", default=APP_ID, help=f"the icon's name (default {APP_ID})")
    args = parser.parse_args(argv)
    for path in render(args.out_dir, args.id):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
