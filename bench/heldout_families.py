"""The held-out family check: tiny random models of every new family, made here with shapes,
seeds and settings Wren's tests never use, converted by llama.cpp's convert_hf_to_gguf.py,
quantized by llama.cpp's llama-quantize, imported by the real `wren models import` and
answered by the real `wren ask` (greedy, float32 activations), against transformers' greedy
answer on the same rendered prompt. One JSON line per file:

    .venv/bin/python bench/heldout_families.py LLAMA_CPP_SRC [--quantize BIN] [--out DIR] [FAMILY ...]

LLAMA_CPP_SRC is a llama.cpp source tree (its convert_hf_to_gguf.py and gguf-py), e.g. the
one in llama-cpp-python's source package; BIN is llama-quantize (default: beside it, in
/work/.tools/llama.cpp/build/bin). Without a llama-quantize only the F32 files are checked.

Quantized files: transformers runs the HF model with each matrix replaced by the quantized
file's own values (gguf-py dequantizes them; each GGUF matrix is matched to its HF weight by
its rows, whatever row order the converter wrote), so the two sides multiply the same
numbers and greedy answers must agree exactly there too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "families"
sys.path[:0] = [str(ROOT), str(DATA)]
QUANTIZE = Path("/work/.tools/llama.cpp/build/bin/llama-quantize")
QUESTION = "Name three rivers of Europe and say which one is longest, please."
MAX_TOKENS = 16
# how much larger a tied model's layer outputs are made (tried: at 1 both answer one token
# over and over; gemma3 at 12 starts with a token Wren stops on)
TIED_BOOST = {"gemma3": 4.0, "olmo2": 4.0}
GUARDS_OFF = """
from wren.engine import paths
from wren.engine.store.store import Store
from wren.engine.turn.plan import SAMPLING_KEY
store = Store(paths.database_path())
store.set_setting(SAMPLING_KEY, {"repetition_penalty": 1.0, "dry_multiplier": 0.0})
store.close()
"""


def _specs() -> dict[str, dict]:
    """Each family's held-out model: sizes, GQA ratio, tying, seed, its family quirks set to
    values none of tests/data/families uses, and the llama-quantize type checked beside F32."""
    import transformers as tf

    return {
        "gemma3": dict(cls=tf.Gemma3ForCausalLM, seed=101, quant="Q8_0", config=lambda v: tf.Gemma3TextConfig(
            vocab_size=v, num_hidden_layers=7, hidden_size=256, intermediate_size=512, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, query_pre_attn_scalar=64, max_position_embeddings=4096,
            rms_norm_eps=1e-6, sliding_window=12, rope_theta=1_000_000.0, rope_local_base_freq=10000.0,
            tie_word_embeddings=True)),
        "phi3": dict(cls=tf.Phi3ForCausalLM, seed=102, quant="Q4_K_M", config=lambda v: tf.Phi3Config(
            vocab_size=v, num_hidden_layers=3, hidden_size=256, intermediate_size=768, num_attention_heads=8,
            num_key_value_heads=2, partial_rotary_factor=0.5, max_position_embeddings=4096,
            original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=250000.0, sliding_window=None,
            tie_word_embeddings=False)),
        "granite": dict(cls=tf.GraniteForCausalLM, seed=103, quant="Q6_K", config=lambda v: tf.GraniteConfig(
            vocab_size=v, num_hidden_layers=3, hidden_size=512, intermediate_size=768, num_attention_heads=8,
            num_key_value_heads=8, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=5_000_000.0,
            embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=1 / 64, logits_scaling=4.0,
            tie_word_embeddings=False)),
        "olmo2": dict(cls=tf.Olmo2ForCausalLM, seed=104, quant="Q8_0", config=lambda v: tf.Olmo2Config(
            vocab_size=v, num_hidden_layers=3, hidden_size=256, intermediate_size=512, num_attention_heads=2,
            num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=500000.0,
            tie_word_embeddings=True)),
        "smollm3": dict(cls=tf.SmolLM3ForCausalLM, seed=105, quant="Q4_K_M", config=lambda v: tf.SmolLM3Config(
            vocab_size=v, num_hidden_layers=8, hidden_size=256, intermediate_size=512, num_attention_heads=4,
            num_key_value_heads=1, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=2_000_000.0,
            tie_word_embeddings=False)),
    }


def make_hf(family: str, spec: dict, out: Path) -> None:
    import make_gemma3_olmo2  # noqa: F401  (gemma3's and olmo2's entries and gemma's embedding scale)
    import make_tiny
    import torch

    known = make_tiny.FAMILIES[family]  # the family's special tokens and tokenizer class
    tok = make_tiny.tokenizer_for(known["specials"])
    config = spec["config"](tok.get_vocab_size())
    config.eos_token_id = tok.token_to_id(known["eos"])
    config.bos_token_id = tok.token_to_id(known["bos"]) if known["bos"] else None
    config.pad_token_id = None
    model = spec["cls"](config).float().eval()
    make_tiny.randomize(model, spec["seed"])
    if config.tie_word_embeddings:
        model.tie_weights()
    with torch.no_grad():
        if not config.tie_word_embeddings:  # sharper logits: greedy choices far from ties
            model.lm_head.weight.mul_(4.0)
        else:  # the layers outweigh the token's own embedding, so a tied head does not echo it
            _boost_layers(family, model)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    template = (DATA / family / "chat_template.jinja").read_text(encoding="utf-8")  # the real one
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": known["tokenizer_class"], "chat_template": template, "eos_token": known["eos"],
        "bos_token": known["bos"], "add_bos_token": False, "model_max_length": 4096,
        "clean_up_tokenization_spaces": False}, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").unlink(missing_ok=True)


def _boost_layers(family: str, model) -> None:
    """Each layer's output TIED_BOOST[family] times larger: gemma3's and olmo2's post-norms set its
    size (gemma3's norms multiply by 1 + weight), the others' o_proj and down_proj."""
    post = ("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")
    for name, param in model.named_parameters():
        if family == "gemma3" and name.endswith(post):
            param.copy_(TIED_BOOST[family] * (1 + param) - 1)
        elif family == "olmo2" and name.endswith(post):
            param.mul_(TIED_BOOST[family])
        elif family not in ("gemma3", "olmo2") and name.endswith(("o_proj.weight", "down_proj.weight")):
            param.mul_(TIED_BOOST.get(family, 4.0))


def _rows(a: np.ndarray) -> dict[bytes, int]:
    return {row.tobytes(): i for i, row in enumerate(a)}


def quantized_weights(f32_gguf: Path, q_gguf: Path, state: dict) -> tuple[dict, dict]:
    """The HF state dict with each matrix as the quantized file holds it, and what changed:
    {tensor: its GGML type}. A GGUF matrix is matched to the HF weight holding the same rows
    (llama.cpp permutes some families' Q/K rows); its dequantized rows go to those places."""
    import gguf

    plain = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(f32_gguf)).tensors}
    params = {name: value.numpy() for name, value in state.items()}
    new, types = {k: v.copy() for k, v in params.items()}, {}
    for t in gguf.GGUFReader(str(q_gguf)).tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            continue
        values = gguf.quants.dequantize(np.array(t.data), t.tensor_type).reshape(plain[t.name].shape)
        before = plain[t.name].reshape(values.shape)
        for name, p in params.items():
            if p.shape != before.shape or p.ndim != 2:
                continue
            where = _rows(p)
            order = [where.get(row.tobytes()) for row in before]
            if None not in order:
                new[name][order] = values
                types[t.name] = t.tensor_type.name
                break
        else:
            raise SystemExit(f"{q_gguf.name}: no HF weight holds the rows of {t.name}")
    return new, types


def wren(home: Path, *args: str, exact: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, WREN_HOME=str(home), WREN_TORCH_COMPILE="off")
    if exact:
        env["WREN_EXACT_ACTIVATIONS"] = "1"
    return subprocess.run([sys.executable, "-m", "wren.engine.terminal", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def wren_answer(home: Path, gguf_path: Path, name: str) -> dict:
    done = wren(home, "models", "import", str(gguf_path), "--name", name)
    if done.returncode:
        return {"error": f"import: {done.stderr.strip()[-400:]}"}
    # greedy as transformers' is: Wren's repetition guards (penalty 1.1 and DRY by default) off
    done = subprocess.run([sys.executable, "-c", GUARDS_OFF], env=dict(os.environ, WREN_HOME=str(home)),
                          capture_output=True, text=True)
    if done.returncode:
        return {"error": f"settings: {done.stderr.strip()[-400:]}"}
    done = wren(home, "ask", "--model", name, "--temperature", "0", "--max-tokens", str(MAX_TOKENS), "--json",
                "--logprobs", "0", "--no-save", QUESTION)
    if done.returncode:
        return {"error": f"ask: {done.stderr.strip()[-400:]}"}
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    deltas = [e for e in events if e.get("type") == "delta"]
    usage = next((e for e in events if e.get("type") == "usage"), {})
    return {"text": "".join(e["text"] for e in deltas),
            "ids": [p["id"] for e in deltas for p in e.get("logprobs", [])],
            "logprobs": [p["logprob"] for e in deltas for p in e.get("logprobs", [])],
            "thinking": "".join(e.get("text", "") for e in events if e.get("type") == "reasoning"),
            "prompt_tokens": usage.get("prompt_tokens")}


def hf_answer(hf_dir: Path, state: dict | None, messages: list[dict], theirs: list[int]) -> dict:
    """transformers' greedy tokens; the margin between its two likeliest tokens at each step;
    and, fed Wren's tokens, the log-probability it gives each (to set beside Wren's)."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    if state is not None:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok(rendered, add_special_tokens=False)["input_ids"]
    specials = {i for i, added in tok.added_tokens_decoder.items() if added.special}
    out: list[int] = []
    margins = []
    with torch.no_grad():
        for _ in range(MAX_TOKENS):  # the whole sequence each step: transformers' own path
            logits = model(torch.tensor([ids + out])).logits[0, -1]
            top = logits.topk(2).values
            margins.append(round(float(top[0] - top[1]), 5))
            nxt = int(logits.argmax())
            if nxt == model.config.eos_token_id or nxt in specials:  # Wren stops on its turn's end
                break
            out.append(nxt)
        # a thinking family's answer drops its leading blank text (reasoning.ThinkSplitter),
        # those tokens' deltas with it: Wren's stream then starts after them
        lead = next((k for k in range(4) if out[k:k + len(theirs)] == theirs
                     and not tok.decode(out[:k]).strip()), 0)
        forced = []
        if theirs:
            logp = model(torch.tensor([ids + out[:lead] + theirs])).logits[0].log_softmax(-1)
            forced = [float(logp[len(ids) + lead - 1 + i, t]) for i, t in enumerate(theirs)]
    return {"text": tok.decode(out, skip_special_tokens=True), "ids": out, "prompt_tokens": len(ids),
            "blank_lead": lead, "top2_margins": margins, "logprobs_of_wrens_tokens": forced}


def check(family: str, spec: dict, llama_cpp: Path, quantize: Path | None, work: Path) -> list[dict]:
    import make_tiny

    hf_dir = work / family / "hf"
    hf_dir.mkdir(parents=True)
    make_hf(family, spec, hf_dir)
    f32 = work / family / "model-f32.gguf"
    make_tiny.convert(llama_cpp, hf_dir, f32, "f32")
    files = [("F32", f32, None, {})]
    if quantize is not None and quantize.exists():
        q = work / family / f"model-{spec['quant'].lower()}.gguf"
        subprocess.run([str(quantize), str(f32), str(q), spec["quant"]], check=True, capture_output=True)
        from safetensors.torch import load_file

        state, types = quantized_weights(f32, q, load_file(hf_dir / "model.safetensors"))
        files.append((spec["quant"], q, state, types))
    config = json.loads((hf_dir / "config.json").read_text())
    results = []
    for label, path, state, types in files:
        home = work / family / f"home-{label}"
        got = wren_answer(home, path, f"{family}-{label.lower()}")
        want = hf_answer(hf_dir, state, [{"role": "user", "content": QUESTION}], got.get("ids", []))
        diff = [abs(a - b) for a, b in zip(got.get("logprobs", []), want["logprobs_of_wrens_tokens"])]
        row = {"family": family, "file": label, "seed": spec["seed"],
               "shape": {k: config.get(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                     "num_key_value_heads", "intermediate_size", "vocab_size",
                                                     "tie_word_embeddings")},
               "types": sorted(set(types.values())), "transformers": want, "wren": got,
               "max_logprob_diff": max(diff, default=None),
               "equal": got.get("ids") == want["ids"][want["blank_lead"]:]
               and got.get("prompt_tokens") == want["prompt_tokens"]
               and not got.get("thinking")}
        results.append(row)
        print(json.dumps(row), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("llama_cpp", type=Path)
    parser.add_argument("families", nargs="*")
    parser.add_argument("--quantize", type=Path, default=QUANTIZE)
    parser.add_argument("--out", type=Path, help="keep the files here (default: a temporary folder)")
    args = parser.parse_args(argv)
    specs = _specs()
    chosen = args.families or list(specs)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        rows = [row for family in chosen for row in check(family, specs[family], args.llama_cpp, args.quantize,
                                                           work)]
    summary = {"summary": {f"{r['family']}/{r['file']}": r["equal"] for r in rows}}
    print(json.dumps(summary))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
