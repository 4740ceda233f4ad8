"""A mixture of experts' load, memory and speed on the torch CPU path, interleaved with
llama.cpp's llama-bench on the same file (bench/random_moe.py makes a synthetic Qwen3-30B-A3B).

Each Wren measurement runs in its own process, so its peak RSS is its own, in each way
the experts can be held: "plain" (read into memory, Q4_K interleaved for the kernels:
WREN_MAP_EXPERTS=0), "mapped" (views of the file's clean pages, read ahead into the page
cache: the default) and "mapped-in" (their pages also mapped into the process as they are read
ahead: WREN_PREFETCH_EXPERTS=map). A run is
llama-bench then each Wren way, back to back (a shared machine drifts within minutes);
figures are medians over --runs, with the load average beside each. Decode is also given
as a fraction of the machine's read bandwidth (one multi-threaded pass over 1 GB) divided
by the bytes one token reads (the active bytes: every tensor but the embedding, and k of
E experts).

    .venv/bin/python bench/moe.py GGUF --home DIR [--runs 2] [--threads 2] [--ways plain,mapped,mapped-in]
        [--llama-bench /work/.tools/llama.cpp/build/bin/llama-bench] [--llama-args "--repack 0"]
        [--out RESULT.json]

The GGUF is moved into DIR's model registry (an 18 GB file is not copied); later runs find it there.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PROMPT = 512
DECODE = int(os.environ.get("WREN_BENCH_DECODE", "32"))  # fewer for a 48-layer file on a loaded machine


def child(folder: Path, threads: int) -> dict:
    """Load, a 512-token prompt twice (the first, cold, on its own; the second timed as
    llama-bench times one, after a warm-up of the same size), 32 decoded tokens (wall and
    process CPU time, and what the kernel did for each); peak RSS."""
    import torch

    from wren.engine.inference.backends.torch import TorchBackend

    torch.set_num_threads(threads)
    started = time.perf_counter()
    model = TorchBackend("cpu").load(folder, compile=False, slots=4)
    load_s = time.perf_counter() - started
    # Measured once the experts' read-ahead has finished (the file in memory, mapped in), as
    # llama-bench measures after its load has read the file in (mmap with MAP_POPULATE):
    # ready_s is that moment, counted from the start of loading.
    from wren.engine.inference.models import weights

    weights.wait_for_read_ahead()
    ready_s = time.perf_counter() - started
    after_load = _status()
    ids = [(i * 7919) % 40000 + 300 for i in range(PROMPT)]
    # The first prompt after loading also maps the experts' pages into the process and warms
    # the threads: reported on its own. llama-bench times a prompt after a warm-up run of the
    # same size, so the compared figure is the second, warm one.
    started = time.perf_counter()
    model.prefill(ids, 0)
    first_prompt_s = time.perf_counter() - started
    started, cpu_started = time.perf_counter(), time.process_time()
    logits = model.prefill(ids, 0)
    prompt_s, prompt_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    token, times, cpu, kernel = int(logits.argmax()), [], [], []
    for i in range(DECODE):
        before = resource.getrusage(resource.RUSAGE_SELF)
        started, cpu_started = time.perf_counter(), time.process_time()
        token = int(model.decode(token, PROMPT + i).argmax())
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        kernel.append(_kernel_share(before, resource.getrusage(resource.RUSAGE_SELF)))
    batch_tok_s = batched(model, token, DECODE)
    # CPU time (all threads) beside wall time: on a shared machine a stage waits for its
    # slowest thread, so wall time measures the other processes as much as the work
    return {"load_s": round(load_s, 2), "ready_s": round(ready_s, 2), "prompt_tok_s": round(PROMPT / prompt_s, 2),
            "prompt_cpu_s": round(prompt_cpu_s, 2), "first_prompt_tok_s": round(PROMPT / first_prompt_s, 2), "decode_cpu_ms_per_token": round(statistics.median(cpu) * 1e3, 1),
            "decode_tok_s": round(1 / statistics.median(times), 3), "batch4_decode_tok_s": batch_tok_s,
            # what the kernel did for a token: system CPU time, and page faults (minor: a
            # page already in memory mapped in; major: read from the disk)
            "decode_sys_ms_per_token": round(statistics.median(k[0] for k in kernel) * 1e3, 1),
            "decode_minor_faults_per_token": round(statistics.median(k[1] for k in kernel)),
            "decode_major_faults_per_token": round(statistics.median(k[2] for k in kernel)),
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "after_load": after_load, "end": _status(), "load_avg": os.getloadavg()[0]}


def _kernel_share(before, after) -> tuple[float, int, int]:
    """System CPU seconds, minor and major page faults between two getrusage readings."""
    return (after.ru_stime - before.ru_stime, after.ru_minflt - before.ru_minflt,
            after.ru_majflt - before.ru_majflt)


def batched(model, token: int, steps: int) -> float:
    """Aggregate tokens/s of 4 sequences decoded together (slot 0 after the prompt, slots
    1-3 after 16-token prompts of their own): experts two rows chose are read once."""
    positions = [PROMPT + DECODE]
    for slot in (1, 2, 3):
        model.prefill([(slot * 131 + i * 17) % 40000 + 300 for i in range(16)], 0, slot=slot)
        positions.append(16)
    tokens, times = [token, 500, 900, 1300], []
    for step in range(steps):
        started = time.perf_counter()
        logits = model.decode_batch(tokens, [p + step for p in positions], [0, 1, 2, 3])
        times.append(time.perf_counter() - started)
        tokens = [int(row.argmax()) for row in logits]
    return round(4 / statistics.median(times), 3)


def read_bandwidth(threads: int) -> float:
    """GB/s of one multi-threaded pass over 1 GB through the kernels (its own process)."""
    code = ("import time, torch; from wren.engine.inference.quant import kernels; "
            f"torch.set_num_threads({threads}); t = torch.ones(1 << 30, dtype=torch.uint8); kernels.read_sum(t); "
            "s = time.perf_counter(); kernels.read_sum(t); print(t.numel() / (time.perf_counter() - s) / 1e9)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return round(float(out.stdout.split()[-1]), 2)


def _status() -> dict:
    """RSS, and its anonymous and file-backed parts (GiB), from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = round(int(value.split()[0]) / 2**20, 2)
    return fields


WAYS = {  # how the experts are held: the environment each way runs under
    "plain": {"WREN_MAP_EXPERTS": "0"},
    "mapped": {"WREN_MAP_EXPERTS": "1"},
    "mapped-in": {"WREN_MAP_EXPERTS": "1", "WREN_PREFETCH_EXPERTS": "map"},  # read ahead and mapped in
}


def wren(folder: Path, way: str, threads: int) -> dict:
    env = dict(os.environ, WREN_CPU_SHARE="0", **WAYS[way])
    out = subprocess.run([sys.executable, __file__, "--child", str(folder), "--threads", str(threads)],
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.splitlines()[-1])


def llama_bench(tool: Path, gguf: Path, threads: int, extra: list[str] = ()) -> dict:
    load = os.getloadavg()[0]
    out = subprocess.run([str(tool), "-m", str(gguf), "-p", str(PROMPT), "-n", str(DECODE), "-t", str(threads),
                          "-r", "1", "-o", "json", *extra], capture_output=True, text=True, timeout=1800)
    if out.returncode:
        return {"error": out.stderr[-2000:]}
    rows = json.loads(out.stdout)
    speed = {("prompt" if r["n_prompt"] else "decode") + "_tok_s": round(r["avg_ts"], 3) for r in rows}
    return speed | {"load_avg": load}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path, nargs="?")
    ap.add_argument("--home", type=Path)
    ap.add_argument("--child", type=Path)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ways", default="plain,mapped", help=f"comma-separated, of {sorted(WAYS)}")
    ap.add_argument("--llama-bench", type=Path, default=Path("/work/.tools/llama.cpp/build/bin/llama-bench"))
    # e.g. "--repack 0": llama.cpp then reads the file's pages as Wren's mapped experts do,
    # instead of repacking them into a private copy (an 18.6 GB Qwen3-30B-A3B file and its
    # copy do not fit a 24 GB machine together)
    ap.add_argument("--llama-args", default="", help="more arguments for llama-bench, space-separated")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    unknown = set(args.ways.split(",")) - set(WAYS)
    if unknown:
        ap.error(f"--ways: {', '.join(sorted(unknown))} is not one of {', '.join(sorted(WAYS))}")
    if args.child:
        print(json.dumps(child(args.child, args.threads)))
        return
    from bench import random_gpt_oss, random_moe
    from wren.engine.modelhub.gguf_file import GGUFFile
    from wren.engine.modelhub.registry import ModelRegistry

    registry = ModelRegistry(args.home)
    name = args.gguf.stem
    started = time.perf_counter()
    try:
        info = registry.get(name)
    except Exception:
        info = registry.import_gguf(args.gguf, name, move=True)
    import_s = round(time.perf_counter() - started, 1)
    gguf = info.path / "model.gguf"
    with GGUFFile(gguf) as g:  # either generator's file: its architecture picks the shape
        arch = str(g.metadata["general.architecture"])
        layers = int(g.metadata[f"{arch}.block_count"])
    maker = random_gpt_oss if arch == random_gpt_oss.ARCH else random_moe
    shape = maker.GptOssShape(layers=layers) if maker is random_gpt_oss else random_moe.MoeShape(layers=layers)
    active = random_moe.active_bytes(maker.plan(shape), shape)
    runs: list[dict] = []
    for _ in range(args.runs):
        run = {"llama.cpp": llama_bench(args.llama_bench, gguf, args.threads, args.llama_args.split()),
               "bandwidth": {"read_bandwidth_gb_s": read_bandwidth(args.threads), "load_avg": os.getloadavg()[0]}}
        for way in args.ways.split(","):
            run[way] = wren(info.path, way, args.threads)
        runs.append(run)
        print(json.dumps(run), file=sys.stderr, flush=True)
    summary = {"file_bytes": gguf.stat().st_size, "layers": layers, "llama_bench_args": args.llama_args,
               "active_bytes_per_token": active,
               "import_s": import_s, "threads": args.threads, "runs": runs, "medians": _medians(runs, active)}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


def _medians(runs: list[dict], active: int) -> dict:
    out: dict = {}
    for who in runs[0]:
        rows = [r[who] for r in runs if "error" not in r[who]]
        if not rows:
            continue
        out[who] = {key: statistics.median(r[key] for r in rows) for key in rows[0]
                    if isinstance(rows[0][key], (int, float))}
    bound = out["bandwidth"]["read_bandwidth_gb_s"] * 1e9 / active  # tokens/s if only reading bounded decode
    out["bandwidth"]["decode_bound_tok_s"] = round(bound, 2)
    for who in out:
        if "decode_tok_s" in out[who]:
            out[who]["decode_fraction_of_bandwidth_bound"] = round(out[who]["decode_tok_s"] / bound, 3)
        if who not in ("llama.cpp", "bandwidth") and "llama.cpp" in out:
            for key in ("decode_tok_s", "prompt_tok_s"):
                out[who][key.replace("_tok_s", "_vs_llama_cpp")] = round(out[who][key] / out["llama.cpp"][key], 3)
    return out


if __name__ == "__main__":
    main()
