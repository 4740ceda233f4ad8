"""`wren serve`'s cost over calling the engine in-process; prints JSON.

    .venv/bin/python bench/serve.py [--backend auto|torch-cpu|scripted] [--delay 0.02]
        [--runs 5] [--tokens 32] [--clients 1,4,16] [--parallel 8]
        [--variants default,h11,no-coalesce] [--client-kinds raw,httpx] [--model FOLDER]

The server (engine + uvicorn on one asyncio loop) runs in this process; each HTTP client is
one long-lived child process (streaming, its connections kept warm), as a real client would
be, so the client's own parsing is not charged to the server's loop and no run pays for a
process start. Two kinds of client, each measured in turn against the same in-process runs
(entries "VARIANT+KIND" under "by_variant" when more than one): `raw`, a lean HTTP/1.1
reader on asyncio streams that still parses every chunk's JSON, whose figures are the
server's cost; and `httpx` (the library the openai package uses), whose pure-Python HTTP
parsing takes several times the CPU per chunk: on a machine with no spare core that time
comes out of the model's, which its figures include. Measured, medians over --runs:

- time to first token: `engine.chat.send` in-process against `POST /api/conversation` (the
  same path: a stored conversation, made beforehand on both sides; and again with the new
  chat made inside the timed span, as a request without conversation_id does), interleaved
  run by run, with the median of the run-by-run differences; and `Serving.stateless_chat` (engine/server/serving.py)
  against `POST /v1/chat/completions` (the OpenAI path: nothing stored); "added_ms" is the
  difference. Target: under 5 ms.
- aggregate answer tokens/s for 1, 4 and 16 concurrent streamed clients, in-process
  (that many stateless answers gathered on the loop) against HTTP, interleaved run by run;
  the ratio of the medians and the median of the run-by-run ratios. Target: under 3% lower
  through HTTP. The model's KV slots are set to --parallel, so concurrent answers share it
  through the batch scheduler where the backend batches.
- the server's overhead per streamed chunk: (HTTP first-to-last-chunk time − in-process
  first-to-last-delta time) / chunks, from the 1-client runs; and per answer token, the CPU
  time of the event loop's thread (where the server's work runs) in-process and through
  HTTP, and the share of one core the client process used (on a machine without a spare
  core, the client's time comes out of the model's).

--variants compares server set-ups (ServerOptions) within one run: one server per variant
over the same engine, each with its own clients, every measurement taking the in-process path
and each variant (and client kind) in turn; the report then has one entry per pair under
"by_variant".

--backend scripted replays a fixed answer at --delay seconds per token through the real
tokenizer, worker, sampler and server (no model arithmetic), to show the server's own cost
without a model's noise; any other backend uses the starter model (eager decode), or with
--model a model folder of Hugging Face layout (config.json, safetensors, tokenizer files), as on
a machine without the starter's package (the device runbook in bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

QUESTION = "Write a short story about a lighthouse keeper who finds a message in a bottle."
# Server set-ups (ServerOptions fields) that --variants can compare within one run.
VARIANTS = {
    "default": {},
    "h11": {"http": "h11"},  # the pure-Python HTTP parser instead of httptools
    "no-coalesce": {"coalesce": False},  # every chunk its own write
}
SCRIPTED_ANSWER = " ".join(["The lighthouse keeper found a bottle on the rocks one grey morning."] * 40)


def cpu_line() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} logical CPUs"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs"


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")  # loaded by the engine's torch backend, if that is the one
    return torch.get_num_threads() if torch is not None else None


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")


# -- the client (child process) -------------------------------------------------------------


class RawHTTP:
    """The lean client: HTTP/1.1 on asyncio streams, no library. Keep-alive connections,
    chunked responses split into SSE lines; each chunk's JSON is still parsed by the caller,
    as any client must. It costs the machine little besides the server's own bytes, so the
    figures through it are the server's; httpx's parsing (h11, pure Python) costs a 2-core
    machine as much again, which the `httpx` client kind shows."""

    def __init__(self, url: str, key: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = f"Host: {self.host}:{self.port}\r\nAuthorization: Bearer {key}\r\n"
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def lines(self, path: str, body: dict) -> AsyncIterator[str]:
        reader, writer = self.idle.pop() if self.idle else await asyncio.open_connection(self.host, self.port)
        data = json.dumps(body).encode()
        writer.write(f"POST {path} HTTP/1.1\r\n{self.head}Content-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"the server answered {status!r}")
        headers = []
        while (line := await reader.readline()) not in (b"\r\n", b""):
            headers.append(line.lower())
        if b"transfer-encoding: chunked\r\n" not in headers:
            raise RuntimeError("expected a chunked stream")
        pending = b""
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                break
            pending += (await reader.readexactly(size + 2))[:-2]
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode()
        self.idle.append((reader, writer))

    async def close(self) -> None:
        for _, writer in self.idle:
            writer.close()


# an HTTP client's POST, streamed: the response's lines
Lines = Callable[[str, dict], AsyncIterator[str]]


async def client_main(url: str, kind: str) -> None:
    """The child: one long-lived HTTP client (its connections kept warm, as a real client
    keeps them), doing what each line of stdin asks and answering with one JSON line.
    `kind`: httpx (a typical Python client, as the openai package uses) or raw (RawHTTP)."""
    key = os.environ["WREN_BENCH_KEY"]
    loop = asyncio.get_running_loop()
    async with contextlib.AsyncExitStack() as stack:
        lines = await _client(stack, url, kind, key)
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            cmd = json.loads(line)
            cpu0 = time.process_time()
            if cmd["phase"] == "conversation":
                out: dict = {"ttft": await _conversation(lines, cmd.get("conversation_id"), cmd["tokens"])}
            else:  # the OpenAI path: `concurrency` streamed chat completions at once
                t0 = time.perf_counter()
                answers = await asyncio.gather(*(_chat(lines, cmd["tokens"]) for _ in range(cmd["concurrency"])))
                out = {"wall": time.perf_counter() - t0, "answers": answers}
            out["client_cpu"] = time.process_time() - cpu0  # this process's CPU seconds for it
            print(json.dumps(out), flush=True)


async def _client(stack: contextlib.AsyncExitStack, url: str, kind: str, key: str) -> Lines:
    """The child's client of `kind`, closed with `stack`, its connections warm."""
    if kind == "raw":
        raw = RawHTTP(url, key)
        stack.push_async_callback(raw.close)
        return raw.lines
    import httpx

    http = await stack.enter_async_context(httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600,
        limits=httpx.Limits(max_connections=64)))
    await http.get("/v1/models")

    async def lines(path: str, body: dict) -> AsyncIterator[str]:
        async with http.stream("POST", path, json=body) as r:
            async for line in r.aiter_lines():
                yield line

    return lines


async def _conversation(lines: Lines, conv_id: int | None, tokens: int) -> float | None:
    """One Wren conversation answer; seconds to its first words."""
    body: dict = {"content": QUESTION, "sampling": {"temperature": 0, "max_tokens": tokens}}
    if conv_id is not None:
        body["conversation_id"] = conv_id
    t0 = time.perf_counter()
    first = None
    async for line in lines("/api/conversation", body):
        if first is None and line.startswith("data: {\"p\": \"/message/content/parts/0\""):
            first = time.perf_counter() - t0
    return first


async def _chat(lines: Lines, tokens: int) -> dict:
    """One streamed chat completion: its first token, the span of its chunks, their count, its tokens."""
    body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0, "max_tokens": tokens}
    t0 = time.perf_counter()
    first = last = None
    chunks = 0
    usage = None
    async for line in lines("/v1/chat/completions", body):
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


class Client:
    """The benchmark's HTTP client: a child process started once, so no run pays for a
    process start or a cold connection, and the server's figures are like for like."""

    def __init__(self, url: str, key: str, kind: str = "httpx"):
        self.url, self.key, self.kind = url, key, kind
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Client:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--client", self.url, "--client-kinds", self.kind, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**os.environ, "WREN_BENCH_KEY": self.key})
        return self

    async def ask(self, **cmd) -> dict:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the benchmark client failed ({await self.proc.wait()})")
        return json.loads(line)

    async def __aexit__(self, *exc) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            await self.proc.wait()


# -- the server and the in-process figures -------------------------------------------------


async def direct_send(engine, params, runs: int, *, create: bool = False) -> list[float]:
    """`create`: the new chat is made inside the timed span, as POST /api/conversation
    without a conversation_id does."""
    from wren.engine.events import Delta
    from wren.engine.records import SendOptions

    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        conv = await engine.conversations.create()
        if not create:
            t0 = time.perf_counter()
        first = None
        async for event in engine.chat.send(conv.id, QUESTION, SendOptions(sampling=params)):
            if first is None and isinstance(event, Delta):
                first = time.perf_counter() - t0
        out.append(first)
    return out


async def direct_stateless(engine, params, concurrency: int, runs: int) -> list[dict]:
    from wren.engine.events import Delta, Usage
    from wren.engine.server.serving import Serving

    answers = Serving(engine)  # what the server answers a stateless request with

    async def one() -> dict:
        t0 = time.perf_counter()
        first = last = None
        chunks = tokens = 0
        async for event in answers.stateless_chat([{"role": "user", "content": QUESTION}], params):
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


def label(variant: str, kind: str) -> str:
    """A server variant with one client kind: "default+raw", "h11+httpx"."""
    return f"{variant}+{kind}"


def rate(run: dict) -> float:
    return sum(a["tokens"] for a in run["answers"]) / run["wall"]


def throughput(runs: list[dict]) -> float:
    return median([rate(r) for r in runs])


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
    elif args.model:
        model = registry.register_folder(args.model, name="bench-model").name
    else:
        model = None
    engine = Engine(Store(home / "wren.sqlite3"), registry, **kwargs)
    await engine.settings.set_performance(parallel_sequences=args.parallel)
    status = await engine.models.load(model, backend=None if args.backend == "scripted" else args.backend)
    # The steady state: a model that compiles its decode step does so in a child process for
    # tens of seconds after loading, taking a core from everything measured meanwhile.
    decode_mode = await engine.models.decode_mode(wait=True)
    key = "wren-" + secrets.token_urlsafe(32)
    # One server per variant, all over the same engine, each with its own client process;
    # every measurement below runs the in-process path and each variant in turn.
    servers = {}
    for name in args.variants:
        server = WrenServer(engine, key, port=0, options=ServerOptions(max_queue=256, **VARIANTS[name]))
        servers[name] = (server, f"http://127.0.0.1:{await server.start()}")
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens)
    report: dict = {
        "cpu": cpu_line(), "model": status.name, "backend": status.backend, "decode_mode": decode_mode,
        "scripted_delay_s": args.delay if args.backend == "scripted" else None,
        "torch_threads": _torch_threads(), "tokens_per_answer": args.tokens, "runs": args.runs, "kv_slots": args.parallel,
        "variants": {name: VARIANTS[name] for name in servers}, "client_kinds": args.client_kinds,
    }
    try:
        async with contextlib.AsyncExitStack() as stack:
            clients = {label(name, kind): await stack.enter_async_context(Client(url, key, kind))
                       for name, (_, url) in servers.items() for kind in args.client_kinds}
            # warm every path once (first-request costs: imports, allocations, connections)
            await direct_stateless(engine, params, 1, 1)
            await direct_send(engine, params, 1)
            for client in clients.values():
                await client.ask(phase="chat", concurrency=1, tokens=4)
            print(f"bench/serve.py: {status.name} on {status.backend} loaded; time to first token", file=sys.stderr)
            for name, entry in (await measure(engine, params, clients, args)).items():
                if len(clients) == 1:
                    report.update(entry)
                else:
                    report.setdefault("by_variant", {})[name] = entry
    finally:
        for server, _ in servers.values():
            await server.stop()
        await engine.close()
        shutil.rmtree(home, ignore_errors=True)  # its own data folder: the converted starter, logs
    return report


async def measure(engine, params, clients: dict, args) -> dict:
    """Each variant's figures; the in-process runs are shared (one per round)."""
    out: dict = {name: {} for name in clients}
    # Time to first token, interleaved run by run (the machine's load drifts): engine.chat.send
    # into a new empty chat against POST /api/conversation into one made the same way (the
    # same engine work), then a new chat made inside the timed span on both sides.
    for create in (False, True):
        send: list[float] = []
        http: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(args.runs):
            send += await direct_send(engine, params, 1, create=create)
            for name, client in clients.items():
                conv_id = None if create else (await engine.conversations.create()).id
                http[name].append((await client.ask(phase="conversation", conversation_id=conv_id,
                                                    tokens=args.tokens))["ttft"])
        for name, times in http.items():
            entry = {"engine_send": median([t * 1000 for t in send]), "http": median([t * 1000 for t in times]),
                     "added_ms_median_of_pairs": median([(h - d) * 1000 for d, h in zip(send, times)])}
            entry["added_ms"] = round(entry["http"] - entry["engine_send"], 3)
            out[name]["ttft_new_chat_ms" if create else "ttft_conversation_ms"] = entry
        print("bench/serve.py: so far " + json.dumps(out), file=sys.stderr, flush=True)

    for c in args.clients:
        print(f"bench/serve.py: {c} concurrent client(s)", file=sys.stderr)
        direct: list[dict] = []
        runs: dict[str, list[dict]] = {name: [] for name in clients}
        for _ in range(args.runs):
            cpu0 = time.thread_time()
            direct += await direct_stateless(engine, params, c, 1)
            direct[-1]["loop_cpu"] = time.thread_time() - cpu0
            for name, client in clients.items():
                cpu0 = time.thread_time()
                runs[name].append(await client.ask(phase="chat", concurrency=c, tokens=args.tokens))
                runs[name][-1]["loop_cpu"] = time.thread_time() - cpu0
        for name, http_runs in runs.items():
            entry = {"in_process_tok_s": throughput(direct), "http_tok_s": throughput(http_runs)}
            entry["http_vs_in_process"] = round(entry["http_tok_s"] / entry["in_process_tok_s"], 4)
            entry["http_vs_in_process_median_of_pairs"] = median(
                [rate(h) / rate(d) for d, h in zip(direct, http_runs)])
            # CPU per answer token: the event loop's thread (the server's own work runs there;
            # in-process, only the engine's event delivery) and the HTTP client process, which
            # on a machine with no spare core takes its time from the model's threads
            entry["loop_cpu_ms_per_token"] = {
                "in_process": median([r["loop_cpu"] * 1000 / max(1, sum(a["tokens"] for a in r["answers"]))
                                      for r in direct]),
                "http": median([r["loop_cpu"] * 1000 / max(1, sum(a["tokens"] for a in r["answers"]))
                                for r in http_runs])}
            entry["client_cpu_share_of_one_core"] = median([r["client_cpu"] / r["wall"] for r in http_runs])
            entry["ttft_ms"] = {"in_process": median([a["ttft"] * 1000 for r in direct for a in r["answers"]]),
                                "http": median([a["ttft"] * 1000 for r in http_runs for a in r["answers"]])}
            entry["ttft_ms"]["added_ms"] = round(entry["ttft_ms"]["http"] - entry["ttft_ms"]["in_process"], 3)
            out[name].setdefault("concurrent_clients", {})[str(c)] = entry
            print(f"bench/serve.py: {name}, {c} client(s): " + json.dumps(entry), file=sys.stderr, flush=True)
            if c == 1:
                per_chunk = []
                for d, h in zip(direct, http_runs):
                    a, b = d["answers"][0], h["answers"][0]
                    if a["chunks"] > 1 and b["chunks"] > 1:
                        per_chunk.append((b["span"] / (b["chunks"] - 1) - a["span"] / (a["chunks"] - 1)) * 1000)
                out[name]["per_chunk_overhead_ms"] = median(per_chunk)
                out[name]["chunks_per_answer"] = median([h["answers"][0]["chunks"] for h in http_runs])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="auto", help="auto, torch-cpu, ... (the starter model) or scripted")
    parser.add_argument("--delay", type=float, default=0.02, help="scripted: seconds per token")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=32, help="answer tokens per request")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--parallel", type=int, default=8, help="KV slots (parallel sequences) for batching")
    parser.add_argument("--variants", default="default",
                        help=f"server set-ups measured side by side, run by run: {', '.join(VARIANTS)}")
    parser.add_argument("--model", help="a model folder (Hugging Face layout) instead of the starter")
    parser.add_argument("--client-kinds", default="raw,httpx",
                        help="the HTTP clients, each its own process: raw (a lean HTTP/1.1 reader), httpx")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # the child: the server's URL
    args = parser.parse_args()
    if args.client:
        asyncio.run(client_main(args.client, args.client_kinds))
        return
    args.clients = [int(c) for c in args.clients.split(",")]
    args.client_kinds = [k.strip() for k in args.client_kinds.split(",") if k.strip()]
    if not args.client_kinds or set(args.client_kinds) - {"raw", "httpx"}:
        parser.error("--client-kinds: choose from raw, httpx")
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.variants:
        parser.error(f"unknown variant(s) {', '.join(unknown) or '(none given)'}: choose from {', '.join(VARIANTS)}")
    print(json.dumps(asyncio.run(server_main(args)), indent=2))


if __name__ == "__main__":
    main()
