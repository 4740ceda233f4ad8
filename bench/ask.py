"""`wren ask` wall time, as a person at a terminal sees it: the resident engine against an
answer in the asking process (`--keep-alive 0`), run after run, interleaved.

    .venv/bin/python bench/ask.py [--runs 5] [--home DIR] [--question TEXT]

A fresh data folder (or --home) gets the starter model; the first resident ask starts the
engine (`first_start_s`), the bench waits until it decodes compiled (a warm install: the
compiled graphs saved, its compiling child gone), then times `--runs` pairs of `wren ask` (resident, then in-process),
each the whole process from exec to exit, pair i with seed i (answers of several lengths;
the two of a pair can differ where the in-process answer starts eagerly and changes to the
compiled step mid-answer). Prints one JSON object; the target is the speed issue's 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from qmatmul import cpu_description  # noqa: E402

# 40 tokens with the starter's tokenizer (`wren tokens`), the question length.
QUESTION = ("In two or three short sentences, please explain why the sky looks so blue at noon but slowly turns "
            "red and orange near sunset, in simple words that a curious ten year old child can easily follow.")
TARGET_S = 3.0


def _wren(*args: str) -> list[str]:
    return [sys.executable, "-m", "wren.engine.terminal", *args]


def _timed_ask(env: dict, question: str, keep_alive: str | None, seed: int = 0) -> dict:
    extra = [] if keep_alive is None else ["--keep-alive", keep_alive]
    started = time.perf_counter()
    done = subprocess.run(_wren("ask", "--json", "--seed", str(seed), *extra, question), env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"wren ask failed ({done.returncode}): {done.stderr[-2000:]}")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    usage = next(e for e in events if e["type"] == "usage")
    return {"wall_s": round(wall, 3), "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"], "ttft_s": round(usage["time_to_first_token"], 4),
            "tokens_per_s": round(usage["tokens_per_second"], 1)}


def _status(env: dict) -> dict:
    done = subprocess.run(_wren("resident", "--json"), env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    return json.loads(done.stdout)


def _children(pid: int) -> list[int]:
    """Live child processes of `pid` (Linux's /proc; elsewhere none are seen)."""
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--home", type=Path, help="data folder (default: a new temporary one)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--compile-wait", type=float, default=300.0,
                        help="seconds to wait for the resident engine's compiled decode step")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="wren-ask-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in ("WREN_KEEP_ALIVE", "WREN_TORCH_COMPILE")}
    env["WREN_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    try:
        _timed_ask(env, "hi", "0")  # the starter imported (a first run's one-off copy)
        first = _timed_ask(env, args.question, None)  # starts the resident engine
        waited = time.perf_counter()
        while _status(env).get("decode_mode") != "compiled" and time.perf_counter() - waited < args.compile_wait:
            time.sleep(1.0)
        # the child goes on compiling the batched step after the single one is in use
        while _children(_status(env)["pid"]) and time.perf_counter() - waited < args.compile_wait:
            time.sleep(1.0)
        mode = _status(env).get("decode_mode")
        resident, here = [], []
        for seed in range(args.runs):  # one seed a pair: answers of several lengths
            resident.append(_timed_ask(env, args.question, None, seed))
            here.append(_timed_ask(env, args.question, "0", seed))
    finally:
        subprocess.run(_wren("resident", "stop"), env=env, cwd=REPO, capture_output=True, timeout=120, check=False)
    out = {
        "bench": "ask", "cpu": cpu_description(), "threads": os.cpu_count(), "question_prompt_tokens": first["prompt_tokens"],
        "first_start_s": first["wall_s"], "resident_decode_mode": mode,
        "resident": {"median_wall_s": _median(resident, "wall_s"), "max_wall_s": max(r["wall_s"] for r in resident),
                     "median_ttft_s": _median(resident, "ttft_s"),
                     "median_tokens": _median(resident, "completion_tokens"), "runs": resident},
        "in_process": {"median_wall_s": _median(here, "wall_s"), "median_ttft_s": _median(here, "ttft_s"),
                       "median_tokens": _median(here, "completion_tokens"), "runs": here},
        "target_s": TARGET_S,
    }
    out["resident_meets_target"] = out["resident"]["median_wall_s"] <= TARGET_S
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
