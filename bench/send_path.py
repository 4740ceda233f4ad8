"""The work one Send does before its first token, with a scripted backend (no model maths),
pre-warmed (the model loaded, a few Sends done first): trips to the database thread, safety
scans of the user's text (`scan` calls, and every detector pass over it, a log line's
redaction included), context assemblies and memory retrievals, counted by wrapping
those entry points from outside (no engine code is changed), and the first-token latency.
Prints JSON; `--out FILE` also writes it there (bench/results/ keeps the ones quoted).
The first-token latency is also split into phases, timed from outside too: from the Send
to the request's submission to the model's worker, from there to the worker's first event,
and from that to the first Delta on the asyncio loop. `--compare FILE` puts an earlier
report's figures (same keys) beside this one's; the machine is shared, so run the two
back to back and read the load averages both record.

    .venv/bin/python bench/send_path.py [--sends 50] [--warm 5] [--out bench/results/x.json]
                                        [--compare bench/results/send_path_after_quiet.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cpuinfo import cpu  # noqa: E402

from tests.fixtures.tiny import make_tiny_model_dir, tiny_engine  # noqa: E402
from wren.engine.context.assemble import ContextAssembler  # noqa: E402
from wren.engine.events import Delta  # noqa: E402
from wren.engine.inference import handoff  # noqa: E402
from wren.engine.inference.backends.scripted import ScriptedBackend  # noqa: E402
from wren.engine.inference.worker import ModelWorker  # noqa: E402
from wren.engine.memory.service import MemoryService  # noqa: E402
from wren.engine.records import Role  # noqa: E402
from wren.engine.safety import scanner  # noqa: E402

QUESTION = "What should I plant along a shady north wall, {n}? Something that flowers in spring."


class Counts:
    """Calls through the wrapped entry points since the last `reset`, and when the Send's
    first request was submitted and its first event put (perf_counter seconds)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.text = ""  # the question being sent: scans of it are counted apart
        self.submitted: float | None = None
        self.first_event: float | None = None

    def reset(self, text: str) -> None:
        self.calls.clear()
        self.text = text
        self.submitted = self.first_event = None

    def snapshot(self) -> dict[str, int]:
        return {k: self.calls[k] for k in ("db_trips", "user_text_scans", "user_text_detector_passes", "all_scans",
                                           "assemblies", "retrievals")}


def instrument(engine, counts: Counts) -> None:
    """Wrap, from outside: the engine's database executor (every trip to the database thread
    is one submit), the scanner's `scan` wherever a module bound it, the assembler's
    `assemble` and the memory service's `retrieve`."""
    pool = getattr(engine, "_db_pool", None) or getattr(getattr(engine, "core", None), "_db_pool", None)
    if pool is None:
        raise SystemExit("send_path: cannot find the engine's database executor (_db_pool) to count trips")
    submit = pool.submit

    def counted_submit(fn, *args, **kwargs):
        counts.calls["db_trips"] += 1
        return submit(fn, *args, **kwargs)

    pool.submit = counted_submit

    original_scan = scanner.scan

    def counted_scan(text, *args, **kwargs):
        counts.calls["all_scans"] += 1
        if counts.text and isinstance(text, str) and counts.text in text:
            counts.calls["user_text_scans"] += 1
        return original_scan(text, *args, **kwargs)

    # every pass of the detectors (a scan's, a log line's redaction) goes through candidates
    original_candidates = scanner.candidates

    def counted_candidates(text, *args, **kwargs):
        if counts.text and isinstance(text, str) and counts.text in text:
            counts.calls["user_text_detector_passes"] += 1
        return original_candidates(text, *args, **kwargs)

    scanner.candidates = counted_candidates

    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("wren.") and getattr(module, "scan", None) is original_scan:
            module.scan = counted_scan

    assemble = ContextAssembler.assemble

    async def counted_assemble(self, *args, **kwargs):
        counts.calls["assemblies"] += 1
        return await assemble(self, *args, **kwargs)

    ContextAssembler.assemble = counted_assemble  # type: ignore[method-assign]

    submit_request = ModelWorker.submit

    def timed_submit(self, request):
        if counts.submitted is None:
            counts.submitted = time.perf_counter()
        return submit_request(self, request)

    ModelWorker.submit = timed_submit  # type: ignore[method-assign]
    put = handoff._Inbox.put  # every worker event goes through the loop's inbox

    def timed_put(self, queue, event, *args, **kwargs):
        if counts.submitted is not None and counts.first_event is None:
            counts.first_event = time.perf_counter()
        return put(self, queue, event, *args, **kwargs)

    handoff._Inbox.put = timed_put  # type: ignore[method-assign]

    retrieve = MemoryService.retrieve

    def counted_retrieve(self, *args, **kwargs):
        counts.calls["retrievals"] += 1
        return retrieve(self, *args, **kwargs)

    MemoryService.retrieve = counted_retrieve  # type: ignore[method-assign]


def method(engine, service: str, name: str, old: str):
    """`engine.<service>.<name>`, or the engine's own method `old` (the engine before issue
    26's services, for the baseline)."""
    owner = getattr(engine, service, None)
    return getattr(owner, name) if owner is not None and hasattr(owner, name) else getattr(engine, old)


async def one_send(engine, counts: Counts, conv_id: int, text: str) -> tuple[float, dict, dict, dict]:
    """(first-token seconds, counts before it, counts for the whole Send, phases in ms)."""
    counts.reset(text)
    t0 = time.perf_counter()
    first: float | None = None
    before_first: dict = {}
    phases: dict = {}
    async for event in method(engine, "chat", "send", "send")(conv_id, text):
        if isinstance(event, Delta) and first is None:
            now = time.perf_counter()
            first = now - t0
            before_first = counts.snapshot()
            if counts.submitted is not None and counts.first_event is not None:
                phases = {"to_submit": (counts.submitted - t0) * 1000,
                          "submit_to_worker_event": (counts.first_event - counts.submitted) * 1000,
                          "worker_event_to_delta": (now - counts.first_event) * 1000}
    if first is None:
        raise RuntimeError("send_path: the Send gave no answer text")
    return first, before_first, counts.snapshot(), phases


async def new_chat(engine, n: int) -> int:
    """A chat with two earlier exchanges and a title (no title request beside the answer)."""
    create = method(engine, "conversations", "create", "create_conversation")
    conv = await create(f"bench {n}")
    store = engine.store
    parent = None
    for i in range(2):
        for role, text in ((Role.USER, f"Earlier question {i} about the garden, chat {n}."),
                           (Role.ASSISTANT, f"Earlier answer {i}: keep the soil moist and mulch it.")):
            parent = store.add_message(conv.id, role, text, parent_id=parent).id
    return conv.id


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main_async(args) -> dict:
    home = Path(tempfile.mkdtemp(prefix="wren-send-path-"))
    os.environ["WREN_HOME"] = str(home)
    os.environ.setdefault("WREN_TORCH_COMPILE", "off")
    model_dir = make_tiny_model_dir(home / "tiny-llama")
    scripted = ScriptedBackend("Hello from Wren, a short scripted answer.")
    engine = tiny_engine(home, model_dir, backend_factory=lambda name: scripted)
    load = method(engine, "models", "load", "load_model")
    await load()
    counts = Counts()
    instrument(engine, counts)
    for n in range(args.warm):  # pre-warmed: imports, caches, the tokenizer's first calls
        await one_send(engine, counts, await new_chat(engine, n), QUESTION.format(n=n))
    load_before = cpu().get("load_average_1_5_15")
    latencies, firsts, wholes, phases = [], [], [], []
    for n in range(args.sends):
        conv_id = await new_chat(engine, args.warm + n)
        latency, before_first, whole, phase = await one_send(engine, counts, conv_id, QUESTION.format(n=n))
        latencies.append(latency * 1000)
        firsts.append(before_first)
        wholes.append(whole)
        if phase:
            phases.append(phase)
    await engine.close()

    def medians(rows: list[dict]) -> dict:
        return {k: statistics.median(r[k] for r in rows) for k in rows[0]}

    return {
        "bench": "send_path",
        "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "backend": "scripted",
        "warm_sends": args.warm,
        "sends": args.sends,
        "before_first_token": medians(firsts),
        "whole_send": medians(wholes),
        "first_token_ms": {"median": round(statistics.median(latencies), 2),
                           "p90": round(percentile(latencies, 0.9), 2),
                           "min": round(min(latencies), 2)},
        # each phase's own median (they need not add up to the first token's median)
        "first_token_phases_ms": {k: round(statistics.median(p[k] for p in phases), 2) for k in phases[0]}
        if phases else {},
        "targets": {"db_trips_before_first_token": 4, "first_token_ms": 5.0},
        "machine_info": {**cpu(), "load_average_before": load_before},
    }


def compared(report: dict, path: Path) -> dict:
    """An earlier report's figures beside this one's: first token, trips and scans."""
    old = json.loads(path.read_text(encoding="utf-8"))
    keys = ("db_trips", "user_text_scans", "assemblies", "retrievals")
    side = {
        "file": str(path), "commit": old.get("commit"),
        "first_token_ms": {"before": old["first_token_ms"], "after": report["first_token_ms"],
                           "median_ratio": round(report["first_token_ms"]["median"] / old["first_token_ms"]["median"], 2)},
        "before_first_token": {k: {"before": old["before_first_token"].get(k), "after": report["before_first_token"].get(k)}
                               for k in keys},
    }
    if old.get("first_token_phases_ms"):
        side["first_token_phases_ms"] = {"before": old["first_token_phases_ms"], "after": report["first_token_phases_ms"]}
    return side


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sends", type=int, default=50)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--out", type=Path, help="also write the JSON to this file")
    ap.add_argument("--compare", type=Path, help="an earlier report (JSON) to put beside this one")
    args = ap.parse_args()
    report = asyncio.run(main_async(args))
    if args.compare:
        report["compared"] = compared(report, args.compare)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
