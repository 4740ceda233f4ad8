"""The process's memory when switching models: a small model, a synthetic ~300 MB one,
back to the small one, then the big one deleted; prints JSON.

    .venv/bin/python bench/switch_memory.py [--layers 4 | --gguf FILE] [--no-release | --old] [--answer]

Both models are random-weight HF folders (tests/fixtures/tiny.py; the big one hidden 1024,
intermediate 4096, float32) loaded by the torch backend on the CPU, as the window's engine
loads them (Engine.models.load). RSS (VmRSS) is read after each load (before --answer asks it a question) and after the delete. --no-release skips
what unloading does to give memory back (engine/inference/release.py), for comparison;
--old also makes the turn planner hold the worker it read sampling defaults for, as it did
before (a strong reference where it now keeps a weak one).
Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(home: Path, layers: int, answer: bool, gguf: Path | None = None) -> dict:
    from tests.fixtures.tiny import make_tiny_model_dir
    from wren.engine.api import Engine
    from wren.engine.modelhub.registry import STARTER_NAME, ModelRegistry
    from wren.engine.store import Store

    registry = ModelRegistry(home / "models")
    small_name = "small"
    if gguf is None:
        small = make_tiny_model_dir(home / "src" / "small")
        big = make_tiny_model_dir(home / "src" / "big", hidden_size=1024, intermediate_size=4096,
                                  num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=4)
        registry.register_folder(small, name="small")
        registry.register_folder(big, name="big")
    else:  # the starter, and a GGUF (e.g. bench/random_gguf.py --preset 1b --layout q4_0): the case
        registry.ensure_starter()
        big = registry.import_gguf(gguf, name="big").path
        small_name = STARTER_NAME
    big_bytes = sum(f.stat().st_size for f in Path(big).iterdir() if f.is_file())
    engine = Engine(Store(home / "wren.sqlite3"), registry)
    steps: dict[str, float] = {}

    async def step(name: str, model: str) -> None:
        await engine.models.load(model, backend="torch-cpu")
        steps[name] = round(rss_mib(), 1)  # before any answer on it: as the user sees it after a switch
        if answer:
            conv = await engine.conversations.create()
            async for _ in engine.chat.send(conv.id, "Say something."):
                pass

    try:
        await step("small_loaded", small_name)
        await step("big_loaded", "big")
        await step("back_to_small", small_name)
        await engine.models.remove("big")
        steps["big_deleted"] = round(rss_mib(), 1)
    finally:
        await engine.close()
    return {"big_model_mib": round(big_bytes / 2**20, 1), "rss_mib": steps,
            "growth_after_switching_back_mib": round(steps["big_deleted"] - steps["small_loaded"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4, help="the big model's layers (~67 MB each)")
    parser.add_argument("--no-release", action="store_true", help="skip the release step, to compare")
    parser.add_argument("--answer", action="store_true", help="answer one question on each model")
    parser.add_argument("--gguf", type=Path, help="the big model: this GGUF, imported; the small one: the starter")
    parser.add_argument("--old", action="store_true",
                        help="as before: no release step, and the turn planner holds the worker it read defaults for")
    args = parser.parse_args()
    os.environ["WREN_TORCH_COMPILE"] = "off"
    if args.no_release or args.old:
        import wren.engine.core as core

        core.release_memory = lambda: None  # type: ignore[assignment]
        core.collect_garbage = lambda: None  # type: ignore[assignment]
    if args.old:
        import types

        import wren.engine.turn.planner as planner

        planner.weakref = types.SimpleNamespace(ref=lambda o: lambda: o)  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WREN_HOME"] = tmp
        result = asyncio.run(measure(Path(tmp), args.layers, args.answer, args.gguf))
    result.update(release=not (args.no_release or args.old), old=args.old, answer=args.answer, machine=platform.processor() or platform.machine(),
                  cpus=os.cpu_count(), load_average=os.getloadavg())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
