"""Safety scanning speed; prints JSON.

Figures are medians over --runs runs:
- scan_ms_per_kb: `scan()` of realistic mixed prose (a few findings per few KB) and of text
  dense with findings (keys, addresses, cards, phone numbers every line), with the shipped
  policy and with one that redacts every secret and personal datum.
- redact_ms_per_kb: `redact()` (what every log field goes through) on the same texts.
- guard_us_per_delta: `OutputGuard` cost per delta for a streamed answer of --answer-kb KB in
  deltas of --delta characters, with the shipped local policy (nothing held back) and the
  redact-everything one (the longest hold-back), plus each one's hold-back in characters.

    .venv/bin/python bench/scan.py [--kb 64] [--runs 7] [--answer-kb 32] [--delta 6]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from wren.engine.safety import OutputGuard, Policy, redact, scan  # noqa: E402

WORDS = ["the", "a", "model", "answer", "question", "window", "token", "memory", "summary", "garden", "river", "music", "recipe", "travel", "budget", "python", "error", "function", "plan", "week", "morning", "friend", "city", "train", "book", "coffee", "version", "1.2.3", "on", "2024-05-17", "at", "10:30", "costs", "12.50", "EUR", "and", "3", "items", "in", "build", "20240517"]
REDACT_ALL = '[actions]\nsecret = "redact"\npii = "redact"\n'


def _token(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def _prose(rng: random.Random, size: int, dense: bool) -> str:
    lines = []
    total = 0
    while total < size:
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 20))]
        if dense or rng.random() < 0.05:
            extra = rng.choice([
                f"key sk-proj-{_token(rng, 120)}",
                f"ghp_{_token(rng, 36)}",
                f"mail {_token(rng, 6).lower()}@corp-mail.net",
                "call +44 20 7946 0958",
                "card 4111 1111 1111 1111",
                "IBAN DE89 3704 0044 0532 0130 00",
                f"password={_token(rng, 12)}",
            ])
            words.insert(rng.randrange(len(words)), extra)
        line = " ".join(words) + ".\n"
        lines.append(line)
        total += len(line)
    return "".join(lines)[:size]


def _median(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _guard_cost(policy: Policy, text: str, delta: int, runs: int) -> tuple[float, int]:
    pieces = [text[i : i + delta] for i in range(0, len(text), delta)]
    hold = OutputGuard(policy, "local").hold_back

    def run() -> None:
        guard = OutputGuard(policy, "local")
        for piece in pieces:
            guard.feed(piece)
        guard.finish()

    return _median(run, runs) / len(pieces) * 1e6, hold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kb", type=int, default=64)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--answer-kb", type=int, default=32)
    parser.add_argument("--delta", type=int, default=6, help="characters per streamed delta")
    args = parser.parse_args()

    rng = random.Random(7)
    texts = {
        "mixed": _prose(rng, args.kb * 1024, dense=False),
        "dense": _prose(rng, args.kb * 1024, dense=True),
    }
    policies = {"shipped": Policy.shipped(), "redact_all": Policy.from_toml(REDACT_ALL)}
    out: dict = {"kb": args.kb, "runs": args.runs, "scan_ms_per_kb": {}, "redact_ms_per_kb": {}}
    for name, text in texts.items():
        out[f"findings_{name}"] = len(scan(text, policies["shipped"], "remote").findings)
        for pname, policy in policies.items():
            seconds = _median(lambda: scan(text, policy, "remote"), args.runs)
            out["scan_ms_per_kb"][f"{name}/{pname}"] = round(seconds * 1000 / args.kb, 3)
        seconds = _median(lambda: redact(text), args.runs)
        out["redact_ms_per_kb"][name] = round(seconds * 1000 / args.kb, 3)

    answer = _prose(rng, args.answer_kb * 1024, dense=False)
    out["guard"] = {"answer_kb": args.answer_kb, "delta_chars": args.delta}
    for pname, policy in policies.items():
        micros, hold = _guard_cost(policy, answer, args.delta, max(3, args.runs // 2))
        out["guard"][f"{pname}_us_per_delta"] = round(micros, 1)
        out["guard"][f"{pname}_hold_back_chars"] = hold
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
