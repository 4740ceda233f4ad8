"""`wren serve`'s cost over calling the engine in-process; prints JSON.

    .venv/bin/python bench/serve.py [--backend auto|torch-cpu|scripted] [--delay 0.02]
        [--runs 5] [--tokens 32] [--clients 1,4,16] [--parallel 8]

The server (engine + uvicorn on one asyncio loop) runs in this process; the HTTP clients
run in a child process (httpx, streaming), as a real client would, so the client's own
parsing is not charged to the server's loop. Measured, medians over --runs:

- time to first token: `Engine.send` in-process against `POST /api/conversation` (the
  same path: a stored conversation, made beforehand on both sides; and again with the new
  chat made inside the timed span, as a request without conversation_id does), interleaved
  run by run, with the median of the run-by-run differences; and `Engine.stateless_chat` against
  `POST /v1/chat/completions` (the OpenAI path: nothing stored); "added_ms" is the
  difference. Target: under 5 ms.
- aggregate answer tokens/s for 1, 4 and 16 concurrent streamed clients, in-process
  (that many stateless answers gathered on the loop) against HTTP; the ratio. Target: under
  3% lower through HTTP. The model's KV slots are set to --parallel, so concurrent answers
  share it through the batch scheduler where the backend batches.
- the server's overhead per streamed chunk: (HTTP first-to-last-chunk time − in-process
  first-to-last-delta time) / chunks, from the 1-client runs.

--backend scripted replays a fixed answer at --delay seconds per token through the real
tokenizer, worker, sampler and server (no model arithmetic), to show the server's own cost
without a model's noise; any other backend uses the starter model (eager decode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

QUESTION = "Write a short story about a lighthouse keeper who finds a message in a bottle."
SCRIPTED_ANSWER = " ".join(["The lighthouse keeper found a bottle on the rocks one grey morning."] * 40)


def cpu_line() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} logical CPUs"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs"


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")


# -- the client (child process) -------------------------------------------------------------


async def client_main(args) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {os.environ['WREN_BENCH_KEY']}"}
    async with httpx.AsyncClient(base_url=args.client, headers=headers, timeout=600,
                                 limits=httpx.Limits(max_connections=64)) as http:
        await http.get("/v1/models")  # a warm connection, as a real client keeps
        if args.phase == "conversation":
            out = []
            ids = [int(i) for i in args.conversations.split(",")] if args.conversations else [None] * args.runs
            for conv_id in ids:
                body = {"content": QUESTION, "sampling": {"temperature": 0, "max_tokens": args.tokens}}
                if conv_id is not None:
                    body["conversation_id"] = conv_id
                t0 = time.perf_counter()
                first = None
                async with http.stream("POST", "/api/conversation", json=body) as r:
                    async for line in r.aiter_lines():
                        if first is None and line.startswith("data: {\"p\": \"/message/content/parts/0\""):
                            first = time.perf_counter() - t0
                out.append(first)
            return {"ttft": out}
        # the OpenAI path: c concurrent streamed chat completions
        async def one() -> dict:
            body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True,
                    "stream_options": {"include_usage": True}, "temperature": 0, "max_tokens": args.tokens}
            t0 = time.perf_counter()
            first = last = None
            chunks = 0
            usage = None
            async with http.stream("POST", "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    data = json.loads(line[6:])
                    if data.get("usage"):
                        usage = data["usage"]
                    if data["choices"] and data["choices"][0]["delta"].get("content"):
                        now = time.perf_counter()
                        first = first if first is not None else now - t0
                        last = now - t0
                        chunks += 1
            return {"ttft": first, "span": (last - first) if chunks > 1 else 0.0, "chunks": chunks,
                    "tokens": usage["completion_tokens"] if usage else 0}

        runs = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            answers = await asyncio.gather(*(one() for _ in range(args.concurrency)))
            runs.append({"wall": time.perf_counter() - t0, "answers": answers})
        return {"runs": runs}


# -- the server and the in-process figures -------------------------------------------------


async def direct_send(engine, params, runs: int, *, create: bool = False) -> list[float]:
    """`create`: the new chat is made inside the timed span, as POST /api/conversation
    without a conversation_id does."""
    from wren.engine.api import SendOptions
    from wren.engine.events import Delta

    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        conv = await engine.create_conversation()
        if not create:
            t0 = time.perf_counter()
        first = None
        async for event in engine.send(conv.id, QUESTION, SendOptions(sampling=params)):
            if first is None and isinstance(event, Delta):
                first = time.perf_counter() - t0
        out.append(first)
    return out


async def direct_stateless(engine, params, concurrency: int, runs: int) -> list[dict]:
    from wren.engine.events import Delta, Usage

    async def one() -> dict:
        t0 = time.perf_counter()
        first = last = None
        chunks = tokens = 0
        async for event in engine.stateless_chat([{"role": "user", "content": QUESTION}], params):
            if isinstance(event, Delta):
                now = time.perf_counter()
                first = first if first is not None else now - t0
                last = now - t0
                chunks += 1
            elif isinstance(event, Usage):
                tokens = event.completion_tokens
        return {"ttft": first, "span": (last - first) if chunks > 1 else 0.0, "chunks": chunks, "tokens": tokens}

    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        answers = await asyncio.gather(*(one() for _ in range(concurrency)))
        out.append({"wall": time.perf_counter() - t0, "answers": answers})
    return out


async def run_client(url: str, key: str, *extra: str) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", url, *extra, stdout=subprocess.PIPE,
        env={**os.environ, "WREN_BENCH_KEY": key})
    out, _ = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"the benchmark client failed ({proc.returncode})")
    return json.loads(out)


def throughput(runs: list[dict]) -> float:
    return median([sum(a["tokens"] for a in r["answers"]) / r["wall"] for r in runs])


async def server_main(args) -> dict:
    os.environ.setdefault("WREN_TORCH_COMPILE", "off")  # eager decode: steady from the first token
    home = Path(tempfile.mkdtemp(prefix="wren-bench-serve-"))
    os.environ["WREN_HOME"] = str(home)
    from wren.engine.api import Engine
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.server.app import ServerOptions, WrenServer
    from wren.engine.store import Store

    registry = ModelRegistry(home / "models")
    kwargs = {}
    if args.backend == "scripted":
        from tests.fixtures.tiny import make_tiny_model_dir
        from wren.engine.inference.backends.scripted import ScriptedBackend

        registry.register_folder(make_tiny_model_dir(home / "tiny"), name="tiny")
        scripted = ScriptedBackend(SCRIPTED_ANSWER, delay=args.delay)
        kwargs["backend_factory"] = lambda name: scripted
        model = "tiny"
    else:
        model = None
    engine = Engine(Store(home / "wren.sqlite3"), registry, **kwargs)
    await engine.set_performance_settings(parallel_sequences=args.parallel)
    status = await engine.load_model(model, backend=None if args.backend == "scripted" else args.backend)
    key = "wren-" + secrets.token_urlsafe(32)
    server = WrenServer(engine, key, port=0, options=ServerOptions(max_queue=256))
    port = await server.start()
    url = f"http://127.0.0.1:{port}"
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens)
    common = ["--runs", str(args.runs), "--tokens", str(args.tokens)]
    report: dict = {
        "cpu": cpu_line(), "model": status.name, "backend": status.backend,
        "scripted_delay_s": args.delay if args.backend == "scripted" else None,
        "tokens_per_answer": args.tokens, "runs": args.runs, "kv_slots": args.parallel,
    }
    try:
        # warm both paths once (first-request costs: imports, allocations)
        await direct_stateless(engine, params, 1, 1)
        await direct_send(engine, params, 1)
        await run_client(url, key, "--phase", "chat", "--concurrency", "1", "--runs", "1", "--tokens", "4")

        print(f"bench/serve.py: {status.name} on {status.backend} loaded; time to first token", file=sys.stderr)
        # Interleaved run by run (the machine's load drifts): Engine.send into a new empty chat
        # against POST /api/conversation into one made the same way (the same engine work),
        # then a new chat made inside the timed span on both sides (no conversation_id).
        for create in (False, True):
            send, conv_http = [], []
            for _ in range(args.runs):
                send += await direct_send(engine, params, 1, create=create)
                extra = ["--conversations", str((await engine.create_conversation()).id)] if not create else []
                conv_http += (await run_client(url, key, "--phase", "conversation", *common[:1], "1",
                                               *common[2:], *extra))["ttft"]
            entry = {"engine_send": median([t * 1000 for t in send]), "http": median([t * 1000 for t in conv_http]),
                     "added_ms_median_of_pairs": median([(h - d) * 1000 for d, h in zip(send, conv_http)])}
            entry["added_ms"] = round(entry["http"] - entry["engine_send"], 3)
            report["ttft_new_chat_ms" if create else "ttft_conversation_ms"] = entry
            print("bench/serve.py: so far " + json.dumps(report), file=sys.stderr, flush=True)

        concurrency = {}
        for c in args.clients:
            print(f"bench/serve.py: {c} concurrent client(s)", file=sys.stderr)
            direct = await direct_stateless(engine, params, c, args.runs)
            http = (await run_client(url, key, "--phase", "chat", "--concurrency", str(c), *common))["runs"]
            entry = {"in_process_tok_s": throughput(direct), "http_tok_s": throughput(http)}
            entry["http_vs_in_process"] = round(entry["http_tok_s"] / entry["in_process_tok_s"], 4)
            entry["ttft_ms"] = {"in_process": median([a["ttft"] * 1000 for r in direct for a in r["answers"]]),
                                "http": median([a["ttft"] * 1000 for r in http for a in r["answers"]])}
            entry["ttft_ms"]["added_ms"] = round(entry["ttft_ms"]["http"] - entry["ttft_ms"]["in_process"], 3)
            concurrency[str(c)] = entry
            print(f"bench/serve.py: {c} client(s): " + json.dumps(entry), file=sys.stderr, flush=True)
            if c == 1:
                per_chunk = []
                for d, h in zip(direct, http):
                    a, b = d["answers"][0], h["answers"][0]
                    if a["chunks"] > 1 and b["chunks"] > 1:
                        per_chunk.append((b["span"] / (b["chunks"] - 1) - a["span"] / (a["chunks"] - 1)) * 1000)
                report["per_chunk_overhead_ms"] = median(per_chunk)
                report["chunks_per_answer"] = median([h["answers"][0]["chunks"] for h in http])
        report["concurrent_clients"] = concurrency
    finally:
        await server.stop()
        await engine.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="auto", help="auto, torch-cpu, ... (the starter model) or scripted")
    parser.add_argument("--delay", type=float, default=0.02, help="scripted: seconds per token")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=32, help="answer tokens per request")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--parallel", type=int, default=8, help="KV slots (parallel sequences) for batching")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # the child: the server's URL
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--conversations", help=argparse.SUPPRESS)  # the child: chats to answer in
    args = parser.parse_args()
    if args.client:
        print(json.dumps(asyncio.run(client_main(args))))
        return
    args.clients = [int(c) for c in args.clients.split(",")]
    print(json.dumps(asyncio.run(server_main(args)), indent=2))


if __name__ == "__main__":
    main()
