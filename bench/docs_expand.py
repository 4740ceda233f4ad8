"""Query expansion with the starter model (issue 30): on the project's test set
(tests/engine/docs/questions.json over tests/data/docs), recall@5 of the answer-holding
passage (its file, holding the answer's words) with the question alone and with the model's
phrasings fused in (engine/library/expand.py), and what the expansion adds before a Send's
first token: the expanded search's time less the plain search's, per question (the
expansion runs before the prompt is built; nothing else in the Send changes). Then a few
Sends each way for the first token itself. Greedy; prints JSON.

    .venv/bin/python bench/docs_expand.py [--limit N] [--sends N] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
HOME = Path(tempfile.mkdtemp(prefix="wren-docs-expand-"))
os.environ["WREN_HOME"] = str(HOME)

from cpuinfo import cpu  # noqa: E402

from wren.engine.api import Engine  # noqa: E402
from wren.engine.events import Delta  # noqa: E402
from wren.engine.inference.sampling import SamplingParams  # noqa: E402
from wren.engine.modelhub.registry import ModelRegistry  # noqa: E402
from wren.engine.records import SendOptions  # noqa: E402
from wren.engine.store import Store  # noqa: E402

DATA = ROOT / "tests" / "data" / "docs"
QUESTIONS = json.loads((ROOT / "tests" / "engine" / "docs" / "questions.json").read_text())


def found(q: dict, passages: list) -> bool:
    return any(Path(p.path).name == q["file"] and q["has"] in p.text for p in passages[:5])


async def search_row(engine: Engine, q: dict) -> dict:
    began = time.perf_counter()
    plain = await engine.library.search(q["q"], 5)
    plain_s = time.perf_counter() - began
    began = time.perf_counter()
    expanded = await engine.library.search(q["q"], 5, expand=True)
    expanded_s = time.perf_counter() - began
    return {"q": q["q"], "file": q["file"], "plain": found(q, plain), "expanded": found(q, expanded),
            "phrasings": engine.library.last_expansion, "plain_seconds": round(plain_s, 3),
            "expanded_seconds": round(expanded_s, 3), "added_seconds": round(expanded_s - plain_s, 3)}


async def first_token(engine: Engine, question: str, expand: bool) -> float:
    conv = await engine.conversations.create()
    options = SendOptions(sampling=SamplingParams(temperature=0.0, max_tokens=4), documents=True, expand_query=expand)
    began = time.perf_counter()
    first = None
    async for event in engine.chat.send(conv.id, question, options):
        if isinstance(event, Delta) and first is None:
            first = time.perf_counter() - began
    return round(first if first is not None else float("nan"), 3)


async def run(limit: int | None, sends: int) -> dict:
    registry = ModelRegistry(HOME / "models")
    registry.ensure_starter()
    engine = Engine(Store(HOME / "wren.sqlite3"), registry)
    try:
        await engine.library.add([str(DATA)])
        await engine.library.sync()
        await engine.models.load(backend="torch-cpu")
        rows = [await search_row(engine, q) for q in QUESTIONS[:limit]]
        ttft = []
        await first_token(engine, "Warm up.", False)  # the first Send's one-off costs, in neither column
        for i, q in enumerate(QUESTIONS[:sends]):  # interleaved, the order alternating
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {expand: await first_token(engine, q["q"], expand) for expand in order}
            ttft.append({"q": q["q"], "plain": got[False], "expanded": got[True]})
    finally:
        await engine.close()
    n = len(rows)
    return {"model": "starter (SmolLM2-135M-Instruct)", "questions": n,
            "recall_at_5_plain": round(sum(r["plain"] for r in rows) / n, 3),
            "recall_at_5_expanded": round(sum(r["expanded"] for r in rows) / n, 3),
            "added_seconds_median": statistics.median(r["added_seconds"] for r in rows),
            "first_token_median": {"plain": statistics.median(t["plain"] for t in ttft) if ttft else None,
                                   "expanded": statistics.median(t["expanded"] for t in ttft) if ttft else None},
            "first_token": ttft, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int)
    parser.add_argument("--sends", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {"machine": cpu(), **asyncio.run(run(args.limit, args.sends)),
              "machine_after": cpu().get("load_average_1_5_15")}
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
