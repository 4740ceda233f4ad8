"""The citation rules replayed on stored answers (issue 30): the starter's answers kept in
bench/results/docs_cited.json (the project's questions) and docs_heldout.json (the held-out
library) go through Wren's attribution as it is now (Library.attribute: markers, quotes,
the match by meaning), over the same files indexed afresh, without asking the model again
(a Send takes half a minute on these machines; a rule's change is measured in seconds).
The prompt's passages are searched again as a Send searches them (deterministic); the held
ones are those the stored row's `near` lists (the project's set) or all of them (held-out,
whose rows keep no report). Prints JSON: cite rate and precision per set, and each row
whose citation the stored run and the replay disagree on; the median time of one answer's
attribution (after the first, which loads the embedder).

    .venv/bin/python bench/docs_replay.py [--set cited|heldout|both] [--rows] [--cited FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
HOME = Path(tempfile.mkdtemp(prefix="wren-docs-replay-"))
os.environ["WREN_HOME"] = str(HOME)

from cite_rates import rates  # noqa: E402
from cpuinfo import cpu  # noqa: E402
from docs_heldout import make_library  # noqa: E402

from wren.engine.api import Engine  # noqa: E402
from wren.engine.library.service import PASSAGES  # noqa: E402
from wren.engine.modelhub.registry import ModelRegistry  # noqa: E402
from wren.engine.store import Store  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SETS = {"cited": (RESULTS / "docs_cited.json", ROOT / "tests" / "data" / "docs"),
        "heldout": (RESULTS / "docs_heldout.json", None)}


async def replay(name: str, stored_path: Path | None = None) -> dict:
    stored_path, data = stored_path or SETS[name][0], SETS[name][1]
    rows = json.loads(stored_path.read_text())["rows"]
    home = Path(tempfile.mkdtemp(prefix=f"wren-replay-{name}-"))
    if data is None:
        data = home / "library"
        make_library(data)
    engine = Engine(Store(home / "wren.sqlite3"), ModelRegistry(home / "models"))
    out = []
    try:
        await engine.library.add([str(data)])
        await engine.library.sync()
        for row in rows:
            passages = await engine.library.search(row["q"], PASSAGES)
            numbers = {n for n, _, _ in row["near"]} if "near" in row else set(range(1, len(passages) + 1))
            held = {p.chunk_id for n, p in enumerate(passages, 1) if n in numbers}
            began = time.perf_counter()
            cited = await engine.library.attribute(row["answer"], row["q"], passages, held)
            out.append({"seconds": round(time.perf_counter() - began, 3), "q": row["q"], "file": row["file"], "stored": row["cited_files"],
                        "replayed": [Path(c.path).name for c in cited], "by": [c.cited_by.value for c in cited]})
    finally:
        await engine.close()
    return {"questions": len(out), "stored": rates(out, lambda r: r["stored"]),
            "replayed": rates(out, lambda r: r["replayed"]),
            "attribute_seconds_median": sorted(r["seconds"] for r in out)[len(out) // 2],
            "changed": [r for r in out if r["stored"] != r["replayed"]], "rows": out}


async def run(names: list[str], with_rows: bool, cited: Path | None = None) -> dict:
    report = {}
    for name in names:
        found = await replay(name, cited if name == "cited" else None)
        if not with_rows:
            found.pop("rows")
        report[name] = found
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("cited", "heldout", "both"), default="both")
    parser.add_argument("--rows", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cited", type=Path, help="another docs_cited.py output to replay (default: the committed one)")
    args = parser.parse_args()
    names = ["cited", "heldout"] if args.set == "both" else [args.set]
    report = {"machine": cpu(), **asyncio.run(run(names, args.rows, args.cited)), "machine_after": cpu().get("load_average_1_5_15")}
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
