"""Held-out mixture-of-experts files through the real CLI: `wren models import` and `wren ask`
(greedy), against transformers' greedy answer on the same rendered prompt. Prints JSON.

The models are made here, apart from the test fixtures, with shapes and seeds the tests never
use (tests/data/families/make_gpt_oss.py and make_qwen3moe.py make theirs: 2 layers, seeds 5
and 7): random weights in transformers' own classes, converted by llama.cpp's
convert_hf_to_gguf.py as the fixtures are (make_tiny.convert: F32, gpt-oss's experts MXFP4 as
the released checkpoints hold them, so transformers' float weights are the file's values).

- gpt-oss: 3 layers (sliding window 8, full, sliding), hidden 96, 6 query heads of 16 over 2,
  16 experts of which a token takes 2, inner 64, seed 1234.
- qwen3moe: 3 layers, hidden 96, 6 query heads of 16 over 3, 24 experts of which a token
  takes 6, inner 48, seed 4321.

Each goes into a fresh WREN_HOME with `wren models import`, then `wren ask --json --temperature 0
--logprobs 0` (no tools, no documents, not saved; Wren's repetition guards off: PLAIN_GREEDY) answers each question; its tokens (the ids of
the logprobs events) are compared with transformers' greedy tokens on transformers' rendering of
the same message (checked equal to Wren's own tokenizer's rendering; the prompt_tokens `wren ask`
reports are given beside its length). Each question is asked twice: with
WREN_EXACT_ACTIVATIONS=1 (float32 activations everywhere: "exact") and as users run it
("default": the activations of quantized weights rounded to 8 bits, here the MXFP4 experts,
so a near-tie can turn a token). The JSON gives the tokens matched before any difference and
transformers' margin between its top two logits there.

    .venv/bin/python bench/heldout_moe.py [--llama-cpp DIR] [--tokens 16] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "data" / "families"
sys.path[:0] = [str(REPO), str(FIXTURES)]

import make_gpt_oss  # noqa: E402
import make_qwen3moe  # noqa: E402  (registers qwen3moe in make_tiny.FAMILIES)
import make_tiny  # noqa: E402

WREN = [sys.executable, "-m", "wren.engine.terminal"]
LLAMA_CPP = Path("/work/.tools/llama.cpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
QUESTIONS = ["What is the capital of France?", "Write two lines about a lighthouse in winter.",
             "List three uses of copper and say why."]


def gpt_oss_config(vocab: int) -> transformers.GptOssConfig:
    return transformers.GptOssConfig(
        vocab_size=vocab, num_hidden_layers=3, hidden_size=96, intermediate_size=64, head_dim=16,
        num_attention_heads=6, num_key_value_heads=2, num_local_experts=16, num_experts_per_tok=2,
        sliding_window=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters=dict(make_gpt_oss.YARN), tie_word_embeddings=False, attention_bias=True,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"])


def make_gpt_oss_file(work: Path, llama_cpp: Path) -> tuple[Path, Path]:
    hf_dir = work / "gpt-oss-hf"
    hf_dir.mkdir()
    make_gpt_oss.config_for = gpt_oss_config
    quantized = make_gpt_oss.make_hf(hf_dir, seed=1234)
    checkpoint = work / "gpt-oss-mxfp4"
    checkpoint.mkdir()
    make_gpt_oss.save_mxfp4_checkpoint(hf_dir, quantized, checkpoint)
    make_tiny.convert(llama_cpp, checkpoint, work / "heldout-gpt-oss.gguf")
    return hf_dir, work / "heldout-gpt-oss.gguf"


def make_qwen3moe_file(work: Path, llama_cpp: Path) -> tuple[Path, Path]:
    hf_dir = work / "qwen3moe-hf"
    hf_dir.mkdir()
    make_tiny.randomize = make_qwen3moe.randomize
    make_tiny.make_hf("qwen3moe", hf_dir, seed=4321, num_hidden_layers=3, hidden_size=96, num_attention_heads=6,
                      num_key_value_heads=3, num_experts=24, num_experts_per_tok=6, moe_intermediate_size=48)
    make_tiny.convert(llama_cpp, hf_dir, work / "heldout-qwen3moe.gguf")
    return hf_dir, work / "heldout-qwen3moe.gguf"


def cli(home: Path, *args: str, timeout: float = 600, exact: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "WREN_HOME": str(home), "WREN_EXACT_ACTIVATIONS": "1" if exact else "0"}
    return subprocess.run([*WREN, *args], env=env, capture_output=True, text=True, timeout=timeout)


# Wren's built-in sampling guards (repetition penalty 1.1, DRY 0.8: engine/inference/presets.py)
# still act at temperature 0, on purpose; the comparison with plain greedy turns them off in the
# bench's own WREN_HOME (setting "sampling", as Settings saves it).
PLAIN_GREEDY = {"repetition_penalty": 1.0, "dry_multiplier": 0.0}
SET_SAMPLING = ("import json, sys; from wren.engine import paths; from wren.engine.store.store import Store; "
                "s = Store(paths.database_path()); s.set_setting('sampling', json.loads(sys.argv[1])); s.close()")


def plain_greedy(home: Path) -> None:
    env = {**os.environ, "WREN_HOME": str(home)}
    subprocess.run([sys.executable, "-c", SET_SAMPLING, json.dumps(PLAIN_GREEDY)], env=env, check=True, timeout=120)


def wren_answer(home: Path, name: str, question: str, tokens: int, exact: bool) -> dict:
    asked = cli(home, "ask", "--model", name, "--json", "--temperature", "0", "--max-tokens", str(tokens),
                "--logprobs", "0", "--tools", "none", "--no-docs", "--no-save", question, exact=exact)
    if asked.returncode:
        raise RuntimeError(f"wren ask failed: {asked.stderr[-1500:]}")
    events = [json.loads(line) for line in asked.stdout.splitlines() if line.startswith("{")]
    ids = [lp["id"] for e in events if e["type"] == "delta" for lp in e.get("logprobs", [])]
    text = "".join(e["text"] for e in events if e["type"] == "delta")
    usage = next(e for e in events if e["type"] == "usage")
    return {"ids": ids, "text": text, "prompt_tokens": usage["prompt_tokens"]}


def transformers_greedy(hf_dir: Path, ids: list[int], tokens: int, stop: set[int]) -> tuple[list[int], list[float]]:
    """Greedy tokens (stopping at an end token, as Wren does) and the top-two margin of each."""
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    out, margins, ids = [], [], list(ids)
    with torch.no_grad():
        for _ in range(tokens):
            row = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(row, 2).values
            token = int(row.argmax())
            margins.append(round(float(top[0] - top[1]), 4))
            if token in stop:
                break
            out.append(token)
            ids.append(token)
    return out, margins


def check_family(family: str, hf_dir: Path, gguf: Path, home: Path, tokens: int) -> dict:
    from wren.engine.tokenize import Tokenizer

    name = f"heldout-{family}"
    started = time.perf_counter()
    imported = cli(home, "models", "import", str(gguf), "--name", name)
    if imported.returncode:
        raise RuntimeError(f"wren models import failed: {imported.stderr[-1500:]}")
    import_s = time.perf_counter() - started
    tok = Tokenizer.from_dir(home / "models" / name) if (home / "models" / name).exists() else None
    hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    stop = {hf_tok.convert_tokens_to_ids(t) for t in ("<|return|>", "<|call|>", "<|im_end|>", "<|endoftext|>")
            if hf_tok.convert_tokens_to_ids(t) is not None}
    rows = []
    for question in QUESTIONS:
        messages = [{"role": "user", "content": question}]
        rendered = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = hf_tok(rendered, add_special_tokens=False)["input_ids"]
        want, margins = transformers_greedy(hf_dir, ids, tokens, stop)
        row: dict = {"question": question, "prompt_tokens_transformers": len(ids),
                     "same_rendering": tok.render_chat(messages) == rendered if tok else None,
                     "transformers_tokens": want, "transformers_text": hf_tok.decode(want)}
        for mode in ("exact", "default"):
            got = wren_answer(home, name, question, tokens, mode == "exact")
            same = next((i for i, (a, b) in enumerate(zip(got["ids"], want, strict=False)) if a != b),
                        min(len(got["ids"]), len(want)))
            row[mode] = {"prompt_tokens": got["prompt_tokens"], "tokens": got["ids"], "text": got["text"],
                         "tokens_matched": same, "equal": got["ids"] == want}
            if got["ids"] != want and same < len(margins):
                row[mode]["transformers_margin_at_difference"] = margins[same]
        rows.append(row)
    return {"family": family, "import_s": round(import_s, 2), "file_bytes": gguf.stat().st_size,
            "all_equal_exact": all(r["exact"]["equal"] for r in rows),
            "all_equal_default": all(r["default"]["equal"] for r in rows), "answers": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", type=Path, default=LLAMA_CPP)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="wren-heldout-moe-") as tmp:
        work, home = Path(tmp), Path(tmp) / "home"
        home.mkdir()
        plain_greedy(home)
        results = [check_family("gpt-oss", *make_gpt_oss_file(work, args.llama_cpp), home, args.tokens),
                   check_family("qwen3moe", *make_qwen3moe_file(work, args.llama_cpp), home, args.tokens)]
    summary = {"transformers": transformers.__version__, "tokens": args.tokens, "wren_sampling": PLAIN_GREEDY,
               "families": results,
               "all_equal_exact": all(r["all_equal_exact"] for r in results),
               "all_equal_default": all(r["all_equal_default"] for r in results)}
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
