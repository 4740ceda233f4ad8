"""Render the Wren window mid-conversation, offscreen, to docs/screenshot.png.

    .venv/bin/python scripts/screenshot.py [--out docs/screenshot.png] [--dark]

A scripted backend answers (no model weights needed), so the picture is the same on every
machine; the window, chat view and streaming path are the real ones.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

FIRST_QUESTION = "How do I read a big CSV file in Python without loading it all into memory?"
FIRST_ANSWER = """Read it **row by row** with the standard `csv` module: the file object is an iterator, so only one line is in memory at a time.

```python
import csv

def total_sales(path: str) -> float:
    total = 0.0
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            total += float(row["amount"])
    return total
```

A few tips:

- Pass `newline=""` so quoted fields with line breaks are read correctly.
- For column-wise work, `pandas.read_csv(path, chunksize=100_000)` yields data frames in chunks.
- Compressed files work the same way through `gzip.open(path, "rt")`."""
SECOND_QUESTION = "Can I make it faster?"
SECOND_ANSWER = """Yes. Three things usually help, in this order:

1. **Skip the dictionaries.** `csv.reader` returns lists and is about twice as fast as `DictReader`; look the column up once with `header.index("amount")`.
2. **Use a faster parser.** `pyarrow.csv.open_csv(path)` streams record batches from C++ and is often 5–10× faster.
3. **Parallelise** only when the disk is not the bottleneck."""
OTHER_CHATS = ["Plan a three-day trip to Lisbon", "Explain RoPE scaling", "Birthday poem for Ana"]


async def _render(out: Path, dark: bool) -> None:
    from tests.fixtures.tiny import make_tiny_model_dir
    from wren.desktop.app import WrenApp
    from wren.engine.api import Engine
    from wren.engine.inference.backends.scripted import ScriptedBackend
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    home = Path(os.environ["WREN_HOME"])
    replies = {FIRST_QUESTION: FIRST_ANSWER, SECOND_QUESTION: SECOND_ANSWER}

    def reply(prompt: str) -> str:
        # The prompt ends with the newest question; answer that one.
        last = max((prompt.rfind(q), a) for q, a in replies.items())
        return last[1] if last[0] >= 0 else "Sure — here is a short answer."

    backend = ScriptedBackend(reply, delay=0.004, context_length=8192)
    registry = ModelRegistry(home / "models")
    registry.register_folder(make_tiny_model_dir(home / "src" / "smollm2"), name="smollm2-135m-instruct")
    store = Store(home / "wren.sqlite3")
    store.set_setting("model", "smollm2-135m-instruct")
    for title in OTHER_CHATS:
        store.create_conversation(title)
    engine = Engine(store, registry, backend_factory=lambda _name: backend)
    # A memory the first answer draws on, so the picture shows provenance under it.
    await engine.memories.add("I write Python and prefer the standard library")

    wren = WrenApp(engine, tray=False)
    window = wren.window
    window.resize(1180, 800)
    await wren.start()
    while engine.models.current is None:
        await asyncio.sleep(0.05)

    c = window.conversations
    finished = asyncio.get_running_loop().create_future()
    c.turn_finished.connect(lambda fin: finished.done() or finished.set_result(fin))
    window.composer.edit.setPlainText(FIRST_QUESTION)
    window.composer._submit()
    await finished
    while not (window.title_label.text() and window.title_label.text() != "New chat"):
        await asyncio.sleep(0.05)
    await c.rename(c.current_id, "Reading big CSV files")
    # Mid-stream: the second answer is partly written when the picture is taken.
    window.composer.edit.setPlainText(SECOND_QUESTION)
    window.composer._submit()
    while len(window.chat.message_widgets()) < 4 or len(window.chat.message_widgets()[-1].text()) < 240:
        await asyncio.sleep(0.01)
    window.composer.edit.setPlainText("")
    window.chat.scroll_to_bottom()
    await asyncio.sleep(0.05)  # let layout and paint settle; events run while this waits
    out.parent.mkdir(parents=True, exist_ok=True)
    if not window.grab().save(str(out)):
        raise SystemExit(f"could not write {out}")
    print(f"wrote {out} ({window.width()}x{window.height()})")
    engine.chat.stop()
    await wren.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    parser.add_argument("--dark", action="store_true", help="render with the dark palette")
    args = parser.parse_args()
    import qasync
    from PySide6.QtWidgets import QApplication

    from wren.desktop import theme

    with tempfile.TemporaryDirectory() as home:
        os.environ["WREN_HOME"] = home
        app = QApplication.instance() or QApplication([sys.argv[0]])
        theme.apply_theme(app, dark=True if args.dark else None)
        qasync.run(_render(args.out.resolve(), args.dark))
    return 0


if __name__ == "__main__":
    sys.exit(main())
