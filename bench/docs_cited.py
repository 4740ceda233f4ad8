"""In the prompt and cited, with the starter model (issue 30): for each question of the
project's test set (tests/engine/docs/questions.json over tests/data/docs), one Send through
the real engine with the library on; counted are the questions whose answer-holding passage
reached the prompt (an included `document` part of the answer's context report holding the
answer's words, in the right file) and those whose answer cites that file (a Citation event
with its path), and the precision of the citations (the share naming the right file). An
answer with no [n] of a held passage is attributed by Wren (quoted, else matched by meaning:
engine/library/matched.py); each row keeps its answer's cosine with every held passage, so
"matched_sweep" gives cite rate and precision for other thresholds and margins without
asking again (the whole answer's match only: the sentence step and a slight quote giving
way are replayed by bench/docs_replay.py), and "before" the figures with the quote
attribution alone. Greedy, short
answers; prints JSON.

    .venv/bin/python bench/docs_cited.py [--limit N] [--max-tokens 64] [--out FILE]
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
HOME = Path(tempfile.mkdtemp(prefix="wren-docs-cited-"))
os.environ["WREN_HOME"] = str(HOME)

from cite_rates import rates  # noqa: E402
from cpuinfo import cpu  # noqa: E402

from wren.engine.api import Engine  # noqa: E402
from wren.engine.context import PartKind, PartState  # noqa: E402
from wren.engine.events import Citation, CitedBy, Delta, Finished  # noqa: E402
from wren.engine.inference.sampling import SamplingParams  # noqa: E402
from wren.engine.library.matched import MARGIN, THRESHOLD, Nearness, best_match  # noqa: E402
from wren.engine.modelhub.registry import ModelRegistry  # noqa: E402
from wren.engine.records import SendOptions  # noqa: E402
from wren.engine.store import Store  # noqa: E402

DATA = ROOT / "tests" / "data" / "docs"
QUESTIONS = json.loads((ROOT / "tests" / "engine" / "docs" / "questions.json").read_text())


async def ask(engine: Engine, q: dict, max_tokens: int) -> dict:
    conv = await engine.conversations.create()
    options = SendOptions(sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens), documents=True)
    began = time.perf_counter()
    events = [e async for e in engine.chat.send(conv.id, q["q"], options)]
    took = time.perf_counter() - began
    finished = next((e for e in events if isinstance(e, Finished)), None)
    report = await engine.conversations.context_report(finished.message_id) if finished and finished.message_id else None
    included = [p for p in (report.parts if report else ()) if p.kind is PartKind.DOCUMENT
                and p.state is PartState.INCLUDED]
    in_prompt = any(q["file"] in p.text and q["has"] in p.text for p in included)
    citations = [e for e in events if isinstance(e, Citation)]
    cited = [Path(e.path).name for e in citations]
    answer = "".join(e.text for e in events if isinstance(e, Delta))
    held = {p.source_ids[0] for p in included if p.source_ids}
    began = time.perf_counter()
    near = await engine.library.nearness(answer, engine.library.given(conv.id), held)
    return {"q": q["q"], "file": q["file"], "in_prompt": in_prompt, "cited_files": cited,
            "cited_by": [e.cited_by.value for e in citations], "cites_file": q["file"] in cited,
            "seconds": round(took, 1), "match_seconds": round(time.perf_counter() - began, 3),
            "near": [[n.number, Path(n.path).name, round(n.cosine, 4)] for n in near], "answer": answer}


def written(row: dict) -> list[str]:
    """The files the answer cited by [n] or by quoting (what Wren did before matching)."""
    return [f for f, by in zip(row["cited_files"], row["cited_by"]) if by != CitedBy.MATCHED.value]


def with_match(row: dict, threshold: float, margin: float) -> list[str]:
    """The files cited with the match at (`threshold`, `margin`) for answers citing none otherwise."""
    if written(row):
        return written(row)
    number = best_match([Nearness(n, f, c) for n, f, c in row["near"]], threshold, margin)
    return [f for n, f, _ in row["near"] if n == number]


def sweep(rows: list[dict]) -> list[dict]:
    return [{"threshold": t / 100, "margin": m / 100, **rates(rows, lambda r: with_match(r, t / 100, m / 100))}
            for t in range(30, 75, 5) for m in range(0, 25, 2)]


def summary(rows: list[dict]) -> dict:
    """Before (markers and quotes), after (and the match, as the events said), and the sweep."""
    return {"before": rates(rows, written), "after": rates(rows, lambda r: r["cited_files"]),
            "matched": {"threshold": THRESHOLD, "margin": MARGIN,
                        "check": rates(rows, lambda r: with_match(r, THRESHOLD, MARGIN))},
            "match_seconds_median": sorted(r["match_seconds"] for r in rows)[len(rows) // 2]}


async def run(limit: int | None, max_tokens: int) -> dict:
    registry = ModelRegistry(HOME / "models")
    registry.ensure_starter()
    engine = Engine(Store(HOME / "wren.sqlite3"), registry)
    try:
        await engine.library.add([str(DATA)])
        await engine.library.sync()
        await engine.models.load(backend="torch-cpu")
        rows = [await ask(engine, q, max_tokens) for q in QUESTIONS[:limit]]
    finally:
        await engine.close()
    n = len(rows)
    return {"model": "starter (SmolLM2-135M-Instruct)", "questions": n, "max_tokens": max_tokens,
            "in_prompt_rate": round(sum(r["in_prompt"] for r in rows) / n, 3),
            "cites_file_rate": round(sum(r["cites_file"] for r in rows) / n, 3),
            "cites_any_rate": round(sum(bool(r["cited_files"]) for r in rows) / n, 3), **summary(rows),
            "targets": {"in_prompt_rate": 0.85, "cites_file_rate": 0.8}, "matched_sweep": sweep(rows), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    machine = cpu()
    report = {"machine": machine, **asyncio.run(run(args.limit, args.max_tokens)),
              "machine_after": cpu().get("load_average_1_5_15")}
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
