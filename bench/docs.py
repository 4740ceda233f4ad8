"""The document library's speed, as JSON: indexing throughput (1,000 generated PDF pages and
5,000 Markdown paragraphs: reading, chunking and storing, then embedding a sample), query
latency at 10k and 100k chunks (synthetic chunks and unit vectors inserted directly; the
query embedded for real, then BM25 + vectors + fusion), and the first-token latency a Send
gains with the library on (a scripted backend, the tiny model's tokenizer; Sends with the
library off and on interleaved). Short by design (2 shared cores): about two minutes.

    .venv/bin/python bench/docs.py [--out bench/results/docs.json] [--embed-sample 500]
                                   [--phases index,query,send] [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cpuinfo import cpu  # noqa: E402

from tests.engine.docs.makers import write_pdf  # noqa: E402
from wren.engine.events import Delta  # noqa: E402
from wren.engine.library.library import LibraryIndex  # noqa: E402
from wren.engine.memory.embed import shared_embedder, to_blob  # noqa: E402
from wren.engine.records import SendOptions  # noqa: E402
from wren.engine.store import Store  # noqa: E402

TOPIC = ["kiln", "glaze", "clay", "firing", "cone", "bisque", "stoneware", "porcelain", "celadon", "crawling", "crazing", "silica", "feldspar", "element", "thermocouple", "controller", "schedule", "studio", "wheel", "potter", "trimming", "slip", "slab", "coil", "handle", "vent", "duct", "breaker", "circuit", "insulation", "brick", "shelf", "stilt", "wax", "resist", "oxide", "iron", "copper", "cobalt", "reduction", "oxidation", "ash", "wood", "gas", "electric", "temperature", "hold", "ramp", "cool", "crystal", "matte", "gloss", "shrinkage", "plasticity", "wedging", "throwing", "centering", "pulling", "bowl", "mug", "plate", "vase", "lid", "foot", "rim"]


def _vocabulary(size: int = 20_000) -> list[str]:
    """Made-up words ranked by frequency (Zipf), the topic's words among them at every rank:
    a query's words then match some chunks, as in real text, not all of them."""
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ten", "ra", "sho", "vel", "dun", "pri", "go", "zar", "ne", "tu", "bri", "fa"]
    words = list(dict.fromkeys("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(size)))
    for n, word in enumerate(TOPIC):
        words.insert(n * len(words) // len(TOPIC) + 5, word)
    return words


WORDS = _vocabulary()
_CUMULATIVE = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(WORDS))))
QUERIES = ["why does my glaze crawl off the pot", "how long should the bisque firing hold",
           "what does the thermocouple error mean", "how to cool a matte glaze slowly",
           "which oxide gives a green celadon", "when to replace kiln elements",
           "how much does porcelain shrink", "how to vent kiln fumes outside"]


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(WORDS, cum_weights=_CUMULATIVE, k=words)).capitalize() + "."


def make_corpus(folder: Path, rng: random.Random) -> None:
    for n in range(10):  # 10 PDFs of 100 pages
        write_pdf(folder / f"report{n}.pdf", [" ".join(sentence(rng, 12) for _ in range(10)) for _ in range(100)])
    for n in range(50):  # 50 Markdown files of 100 paragraphs under 10 headings
        parts = [f"# Notes {n}"]
        for p in range(100):
            if p % 10 == 0:
                parts.append(f"## Section {p // 10}")
            parts.append(" ".join(sentence(rng, 10) for _ in range(5)))
        (folder / f"notes{n}.md").write_text("\n\n".join(parts) + "\n")


def bench_indexing(tmp: Path, sample: int) -> dict:
    rng = random.Random(1)
    folder = tmp / "corpus"
    folder.mkdir()
    make_corpus(folder, rng)
    store = Store(tmp / "index.db")
    store.bind()
    library = LibraryIndex(store.db, lambda fn: fn(store.db), lambda: None)
    library.add([folder])
    began = time.perf_counter()
    progress = library.sync()
    read_seconds = time.perf_counter() - began
    chunks = library.status()["counts"]["chunks"]
    by_format = {f: c for f, c in store.db.execute_sql(
        "SELECT f.format, count(*) FROM doc_chunk c JOIN doc_file f ON f.id = c.file_id GROUP BY f.format")}
    embedder = shared_embedder()
    out = {"files": progress.changed, "chunks": chunks, "chunks_by_format": by_format,
           "read_chunk_store_seconds": round(read_seconds, 2),
           "read_chunk_store_chunks_per_s": round(chunks / read_seconds, 1)}
    if embedder is not None:
        texts = [r[0] for r in store.db.execute_sql("SELECT text FROM doc_chunk ORDER BY random() LIMIT ?", (sample,))]
        embedder.embed(texts[:8])  # warm
        began = time.perf_counter()
        embedder.embed(texts)
        seconds = time.perf_counter() - began
        rate = len(texts) / seconds
        out.update(embed_sample=len(texts), embed_chunks_per_s=round(rate, 1),
                   whole_pass_chunks_per_s_estimate=round(chunks / (read_seconds + chunks / rate), 1))
    again = time.perf_counter()
    library.sync()
    out["unchanged_rescan_seconds"] = round(time.perf_counter() - again, 3)
    store.close()
    return out


def fill(store: Store, count: int, model: str, rng: random.Random) -> None:
    """`count` synthetic chunks with random unit vectors, straight into the tables."""
    import numpy as np

    db = store.db
    with db.atomic():
        db.execute_sql("INSERT INTO doc_source (path, kind) VALUES ('/bench', 'folder')")
        db.execute_sql("INSERT INTO doc_file (source_id, path, state) VALUES (1, '/bench/all.md', 'indexed')")
        vectors = np.random.default_rng(0).standard_normal((count, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        cursor = db.cursor()
        for start in range(0, count, 5000):
            rows = [(1, n, " ".join(sentence(rng, 12) for _ in range(4)), '{"lines": [1, 1]}', 60)
                    for n in range(start, min(count, start + 5000))]
            cursor.executemany("INSERT INTO doc_chunk (file_id, ord, text, location, tokens) VALUES (?, ?, ?, ?, ?)",
                               rows)
        ids = [r[0] for r in db.execute_sql("SELECT id FROM doc_chunk ORDER BY id")]
        cursor.executemany("INSERT INTO doc_vector (chunk_id, model, vector) VALUES (?, ?, ?)",
                           [(i, model, to_blob(v)) for i, v in zip(ids, vectors)])


def bench_queries(tmp: Path, count: int) -> dict:
    embedder = shared_embedder()
    model = embedder.name if embedder is not None else "none"
    store = Store(tmp / f"q{count}.db")
    store.bind()
    fill(store, count, model, random.Random(2))
    library = LibraryIndex(store.db, lambda fn: fn(store.db), shared_embedder)
    began = time.perf_counter()
    library.search("warm up the matrix", 5)
    first = time.perf_counter() - began
    whole, cpu_ms, embed_ms = [], [], []
    for _ in range(3):
        for q in QUERIES:
            t0, c0 = time.perf_counter(), time.thread_time()
            library.search(q, 5)
            whole.append((time.perf_counter() - t0) * 1000)
            cpu_ms.append((time.thread_time() - c0) * 1000)  # one thread does it all: its CPU time
            if embedder is not None:
                t0 = time.perf_counter()
                embedder.embed([q])
                embed_ms.append((time.perf_counter() - t0) * 1000)
    store.close()
    return {"chunks": count, "first_query_loads_vectors_ms": round(first * 1000, 1),
            "query_ms_median": round(statistics.median(whole), 2),
            "query_ms_p90": round(sorted(whole)[int(len(whole) * 0.9)], 2),
            # what the query costs on a core of its own (the shared machine's load set aside)
            "query_cpu_ms_median": round(statistics.median(cpu_ms), 2),
            "of_which_query_embedding_ms_median": round(statistics.median(embed_ms), 2) if embed_ms else None}


async def bench_first_token(tmp: Path, sends: int) -> dict:
    from tests.fixtures.tiny import make_tiny_model_dir, tiny_engine
    from wren.engine.inference.backends.scripted import ScriptedBackend

    os.environ["WREN_HOME"] = str(tmp / "home")
    os.environ.setdefault("WREN_TORCH_COMPILE", "off")
    model_dir = make_tiny_model_dir(tmp / "home" / "tiny-llama")
    engine = tiny_engine(tmp / "home", model_dir, backend_factory=lambda name: ScriptedBackend("A short answer [1]."))
    await engine.db(fill, engine.store, 10_000, shared_embedder().name if shared_embedder() else "none",
                    random.Random(3))
    await engine.models.load()

    async def first_token(documents: bool, n: int) -> float:
        conv = await engine.conversations.create()
        began = time.perf_counter()
        took = None
        async for event in engine.chat.send(conv.id, QUERIES[n % len(QUERIES)], SendOptions(documents=documents)):
            if isinstance(event, Delta) and took is None:
                took = time.perf_counter() - began
        return (took or 0.0) * 1000

    for n in range(3):  # warm: the embedder, the vectors' matrix, the caches
        await first_token(True, n)
        await first_token(False, n)
    off, on = [], []
    for n in range(sends):  # interleaved: the shared machine's load falls on both alike
        off.append(await first_token(False, n))
        on.append(await first_token(True, n))
    await engine.close()
    return {"library_chunks": 10_000, "sends_each": sends, "first_token_ms_library_off_median": round(statistics.median(off), 2),
            "first_token_ms_library_on_median": round(statistics.median(on), 2),
            "added_ms_median": round(statistics.median(on) - statistics.median(off), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--embed-sample", type=int, default=500)
    parser.add_argument("--sends", type=int, default=15)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--phases", default="index,query,send", help="which parts to run (comma-separated)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wren-docs-bench-"))
    report: dict = {"machine": cpu(), "vectors": "numpy over the doc_vector table (one matrix in memory)"}
    phases = set(args.phases.split(","))
    if "index" in phases:
        report["indexing"] = bench_indexing(tmp, args.embed_sample)
        print(json.dumps(report["indexing"]), file=sys.stderr, flush=True)
    if "query" in phases:
        report["queries"] = []
        for n in args.sizes.split(","):
            report["queries"].append(bench_queries(tmp, int(n)))
            print(json.dumps(report["queries"][-1]), file=sys.stderr, flush=True)
    if "send" in phases:
        report["send"] = asyncio.run(bench_first_token(tmp, args.sends))
    report["machine_after"] = cpu().get("load_average_1_5_15")
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
