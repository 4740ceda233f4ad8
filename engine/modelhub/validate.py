"""Check an opened llama-family GGUF against itself before anything is built from it.

A model file is untrusted input: every number the importer and loader use is checked here
against sane bounds and against the tensor table (one pass over metadata and tensor
entries; no tensor data is read), so a damaged or hostile file fails at import with a
message naming the file, the key or tensor, and the bad value, instead of allocating
memory for 100,000 layers or failing deep inside the loader.

Strings: general.name is refused past 256 characters (it is shown in the model list; no
real model's name comes close), other metadata strings past 64 KiB and chat templates
past 1 MiB.
"""

from __future__ import annotations

import errno
import math
import re
import shutil
from pathlib import Path
from typing import Any

from ..errors import ModelFileError, UnsupportedArchitecture
from ..inference import families
from .gguf_file import GGUFFile
from .sizing import human_size

MAX_LAYERS = 1024
MAX_HIDDEN = 65536
MAX_HEAD_DIM = 4096
MAX_FFN = 1 << 20
MAX_EXPERTS = 4096
MAX_CONTEXT = 1 << 24  # 16M positions; 1M-context models exist
MAX_VOCAB = 1 << 22
MAX_NAME_CHARS = 256
MAX_STRING_CHARS = 1 << 16
MAX_TEMPLATE_CHARS = 1 << 20
MAX_TOKEN_CHARS = 1 << 16

_REQUIRED, _ABSENT = object(), object()
_LAYER_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
_QK_NORM_PARTS = ("attn_q_norm", "attn_k_norm")
# llama.cpp-only per-layer tensors the models derive from config instead
_SKIPPED_PARTS = frozenset({"attn_rot_embd"})
_TEMPLATE_KEY = re.compile(r"^tokenizer\.chat_template(\..+)?$")


def validate_llama_gguf(gguf: GGUFFile, arch: str) -> None:
    """Raise ModelFileError (or UnsupportedArchitecture, where the file is sound but asks for
    something Wren cannot run) unless every field the importer reads is sane and agrees with
    the tensors present."""
    _Checker(gguf, arch).run()


class _Checker:
    def __init__(self, gguf: GGUFFile, arch: str) -> None:
        self.gguf, self.arch, self.meta, self.path = gguf, arch, gguf.metadata, gguf.label
        self.family = families.by_architecture(arch)

    # --- reporting --------------------------------------------------------------------------

    def bad(self, what: str, value: Any, requirement: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {what} is {_short_repr(value)}; {requirement}")

    def unsupported(self, message: str) -> UnsupportedArchitecture:
        return UnsupportedArchitecture(f"{self.path} {message}")

    # --- metadata ---------------------------------------------------------------------------

    def raw(self, key: str, default: Any = _REQUIRED) -> Any:
        full = f"{self.arch}.{key}"
        value = self.meta.get(full)
        if value is None:
            if default is _REQUIRED:
                raise ModelFileError(f"{self.path} lacks the metadata key {full}")
            return default
        if isinstance(value, list):  # some GGUFs store per-layer lists; one value must serve all
            if not value or any(v != value[0] for v in value):
                raise self.unsupported(f"varies {full} across layers, which Wren cannot run")
            value = value[0]
        return value

    def integer(self, key: str, low: int, high: int, default: Any = _REQUIRED) -> Any:
        """The key's whole-number value within [low, high]; `default` (unchecked) if absent."""
        value = self.raw(key, _ABSENT if default is not _REQUIRED else _REQUIRED)
        if value is _ABSENT:
            return default
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(f"{self.arch}.{key}", value, "it must be a whole number")
        if not low <= value <= high:
            raise self.bad(f"{self.arch}.{key}", value, f"it must be between {low} and {high}")
        return value

    def real(self, key: str, low: float, high: float) -> None:
        """Absent, or a finite number in the open interval (low, high)."""
        value = self.raw(key, None)
        if value is None:
            return
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.bad(f"{self.arch}.{key}", value, "it must be a number")
        if not (math.isfinite(value) and low < value < high):
            raise self.bad(f"{self.arch}.{key}", value, f"it must be finite, above {low:g} and below {high:g}")

    def strings(self) -> None:
        for key, value in self.meta.items():
            if not isinstance(value, str):
                continue
            limit = (MAX_NAME_CHARS if key == "general.name"
                     else MAX_TEMPLATE_CHARS if _TEMPLATE_KEY.match(key) else MAX_STRING_CHARS)
            if len(value) > limit:
                raise ModelFileError(
                    f"{self.path}: the metadata string {key} is {len(value)} characters long; "
                    f"Wren accepts at most {limit}"
                )

    # --- the whole check --------------------------------------------------------------------

    def run(self) -> None:
        if self.raw("expert_count", 0) and not self.family.experts:
            raise self.unsupported(f"is a mixture-of-experts {self.arch} model, which Wren cannot run")
        self.strings()
        dims = self.hyperparameters()
        vocab = self.tokenizer()
        self.tensors(dims, vocab)

    def hyperparameters(self) -> dict[str, int]:
        arch = self.arch
        layers = self.integer("block_count", 1, MAX_LAYERS)
        hidden = self.integer("embedding_length", 1, MAX_HIDDEN)
        heads = self.integer("attention.head_count", 1, hidden)
        kv_heads = self.integer("attention.head_count_kv", 1, heads, default=heads)
        if heads % kv_heads:
            raise self.bad(f"{arch}.attention.head_count_kv", kv_heads,
                           f"it must divide {arch}.attention.head_count ({heads})")
        head_dim = self.integer("attention.key_length", 1, MAX_HEAD_DIM, default=hidden // heads)
        rope_dims = self.raw("rope.dimension_count", head_dim)
        if self.raw("attention.value_length", head_dim) != head_dim or (
                rope_dims != head_dim and not self.family.partial_rotary):
            raise self.unsupported("uses partial RoPE or unequal key/value sizes")
        if rope_dims != head_dim:  # phi3: RoPE turns the first rope_dims of each head
            rope_dims = self.integer("rope.dimension_count", 2, head_dim)
            if rope_dims % 2:
                raise self.bad(f"{arch}.rope.dimension_count", rope_dims, "it must be even")
        if not 2 <= head_dim <= MAX_HEAD_DIM or head_dim % 2:
            raise self.bad(f"the attention head size ({arch}.attention.key_length, else {arch}.embedding_length "
                           f"{hidden} / {arch}.attention.head_count {heads})", head_dim,
                           f"it must be even, for rotary embeddings, and at most {MAX_HEAD_DIM}")
        ffn = self.integer("feed_forward_length", 1, MAX_FFN, default=0 if self.family.experts else _REQUIRED)
        self.integer("context_length", 1, MAX_CONTEXT, default=None)
        self.real("rope.freq_base", 0.0, math.inf)
        self.real("attention.layer_norm_rms_epsilon", 0.0, 1.0)
        self.real("rope.scaling.factor", 0.0, math.inf)
        self.integer("rope.scaling.original_context_length", 1, MAX_CONTEXT, default=None)
        self.real("rope.scaling.attn_factor", 0.0, math.inf)
        self.integer("attention.sliding_window", 0, MAX_CONTEXT, default=None)
        return {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
                "ffn": ffn, "rope_dims": rope_dims, **self.experts()}

    def experts(self) -> dict[str, int]:
        """A mixture's sizes: how many experts, how many a token uses, each one's inner size."""
        if not self.family.experts:
            return {}
        experts = self.integer("expert_count", 1, MAX_EXPERTS)
        return {"experts": experts, "used": self.integer("expert_used_count", 1, experts),
                "expert_ffn": self.integer("expert_feed_forward_length", 1, MAX_FFN)}

    def layer_shapes(self, d: dict[str, int]) -> dict[str, tuple[tuple[int, ...], str]]:
        """Each per-layer weight's shape, and the metadata that make it (for the message)."""
        arch, hidden, head_dim = self.arch, d["hidden"], d["head_dim"]
        embed = f"{arch}.embedding_length {hidden}"
        q_size = f"{arch}.attention.head_count {d['heads']} x head size {head_dim}"
        kv_size = f"{arch}.attention.head_count_kv {d['kv_heads']} x head size {head_dim}"
        ffn_size = f"{arch}.feed_forward_length {d['ffn']}"
        q_rows, kv_rows, ffn = d["heads"] * head_dim, d["kv_heads"] * head_dim, d["ffn"]
        shapes = {
            "attn_norm": ((hidden,), embed), "ffn_norm": ((hidden,), embed),
            "attn_q": ((q_rows, hidden), f"{q_size}, {embed}"),
            "attn_k": ((kv_rows, hidden), f"{kv_size}, {embed}"),
            "attn_v": ((kv_rows, hidden), f"{kv_size}, {embed}"),
            "attn_output": ((hidden, q_rows), f"{embed}, {q_size}"),
            "ffn_gate": ((ffn, hidden), f"{ffn_size}, {embed}"),
            "ffn_up": ((ffn, hidden), f"{ffn_size}, {embed}"),
            "ffn_down": ((hidden, ffn), f"{embed}, {ffn_size}"),
        }
        if self.family.qk_norm:
            shapes |= {part: ((head_dim,), f"head size {head_dim}") for part in _QK_NORM_PARTS}
        if self.family.qk_norm_whole:  # olmo2: over all of q and of k
            shapes |= {"attn_q_norm": ((q_rows,), q_size), "attn_k_norm": ((kv_rows,), kv_size)}
        # the family's other norms (gemma3's after attention and the MLP) span the hidden size
        shapes |= {part: ((hidden,), embed) for part in self.family.layer_tensors
                   if part.endswith("_norm") and part not in shapes}
        if self.family.experts:
            shapes |= self.expert_shapes(d, embed)
        if "attn_sinks" in self.family.layer_tensors:  # gpt-oss: a logit per query head
            shapes["attn_sinks"] = ((d["heads"],), f"{arch}.attention.head_count {d['heads']}")
        if self.family.fused_projections:  # phi3: q, k, v in one tensor, and gate, up in ffn_up
            shapes |= {"attn_qkv": ((q_rows + 2 * kv_rows, hidden), f"{q_size} + 2 x {kv_size}, {embed}"),
                       "ffn_up": ((2 * ffn, hidden), f"2 x {ffn_size}, {embed}")}
        return shapes

    def expert_shapes(self, d: dict[str, int], embed: str) -> dict[str, tuple[tuple[int, ...], str]]:
        """The router [experts, hidden] and the 3-D expert tensors [experts, rows, cols]: a
        count in the metadata that the tensors do not have is refused naming the tensor."""
        arch, hidden, experts, ffn = self.arch, d["hidden"], d["experts"], d["expert_ffn"]
        count, size = f"{arch}.expert_count {experts}", f"{arch}.expert_feed_forward_length {ffn}"
        return {
            "ffn_gate_inp": ((experts, hidden), f"{count}, {embed}"),
            "ffn_gate_exps": ((experts, ffn, hidden), f"{count}, {size}, {embed}"),
            "ffn_up_exps": ((experts, ffn, hidden), f"{count}, {size}, {embed}"),
            "ffn_down_exps": ((experts, hidden, ffn), f"{count}, {embed}, {size}"),
        }

    def tensors(self, d: dict[str, int], vocab: int) -> None:
        arch, layers, hidden = self.arch, d["layers"], d["hidden"]
        shapes = self.layer_shapes(d)
        biases = self.family.bias_parts
        rows = f"the {vocab} tokens of tokenizer.ggml.tokens, {arch}.embedding_length {hidden}"
        global_shapes = {
            "token_embd.weight": ((vocab, hidden), rows),
            "output.weight": ((vocab, hidden), rows),
            "output_norm.weight": ((hidden,), f"{arch}.embedding_length {hidden}"),
            "rope_freqs.weight": ((d["head_dim"] // 2,), f"half the head size {d['head_dim']}"),
        }
        half_rope = ((d["rope_dims"] // 2,), f"half of {arch}.rope.dimension_count {d['rope_dims']}")
        global_shapes |= {"rope_factors_long.weight": half_rope, "rope_factors_short.weight": half_rope}
        present: dict[int, set[str]] = {}
        for info in self.gguf.tensors.values():
            name = info.name
            if name in global_shapes:
                self.shape(name, info.shape, *global_shapes[name])
                continue
            match = _LAYER_RE.match(name)
            if match is None:
                raise self.unsupported(f"has a tensor Wren does not know: {name}")
            layer, part, kind = int(match.group(1)), match.group(2), match.group(3)
            if part in _SKIPPED_PARTS and kind == "weight":
                continue
            if part not in shapes or (kind == "bias" and part not in biases):
                raise self.unsupported(f"has a tensor Wren does not know: {name}")
            if layer >= layers:
                raise ModelFileError(
                    f"{self.path}: tensor {name} belongs to layer {layer}, but {arch}.block_count is {layers}"
                )
            expected, why = shapes[part]
            self.shape(name, info.shape, expected if kind == "weight" else expected[:-1], why)
            if kind == "weight":
                present.setdefault(layer, set()).add(part)

        for name in ("token_embd.weight", "output_norm.weight"):
            if name not in self.gguf.tensors:
                raise ModelFileError(f"{self.path} has no {name} tensor")
        required = tuple(self.family.layer_tensors)
        for layer in range(layers):
            have = present.get(layer, set())
            for part in required:
                if part not in have:
                    raise ModelFileError(
                        f"{self.path}: {arch}.block_count is {layers}, but tensor blk.{layer}.{part}.weight "
                        f"is missing ({len(present)} layers have tensors)"
                    )

    def shape(self, name: str, shape: tuple[int, ...], expected: tuple[int, ...], why: str) -> None:
        if tuple(shape) != expected:
            raise ModelFileError(
                f"{self.path}: tensor {name} has shape {list(shape)}, but the metadata make it "
                f"{list(expected)} ({why})"
            )

    def tokenizer(self) -> int:
        tokens = self.meta.get("tokenizer.ggml.tokens")
        if not tokens:
            raise self.unsupported("has no tokenizer vocabulary (tokenizer.ggml.tokens)")
        if not isinstance(tokens, list) or set(map(type, tokens)) != {str}:
            raise ModelFileError(f"{self.path}: tokenizer.ggml.tokens is not a list of strings")
        if not 1 <= len(tokens) <= MAX_VOCAB:
            raise self.bad("the length of tokenizer.ggml.tokens", len(tokens), f"it must be between 1 and {MAX_VOCAB}")
        longest = max(map(len, tokens))
        if longest > MAX_TOKEN_CHARS:
            raise ModelFileError(
                f"{self.path}: a token of tokenizer.ggml.tokens is {longest} characters long; "
                f"Wren accepts at most {MAX_TOKEN_CHARS}"
            )
        for key, kinds in (("tokenizer.ggml.token_type", (int,)), ("tokenizer.ggml.scores", (int, float))):
            values = self.meta.get(key)
            if values is None:
                continue
            if not isinstance(values, list) or not set(map(type, values)) <= set(kinds):
                raise ModelFileError(f"{self.path}: {key} is not a list of numbers")
            if len(values) != len(tokens):
                raise ModelFileError(
                    f"{self.path}: {key} has {len(values)} entries, but tokenizer.ggml.tokens has {len(tokens)}"
                )
        merges = self.meta.get("tokenizer.ggml.merges")
        if merges is not None and (not isinstance(merges, list) or not set(map(type, merges)) <= {str}):
            raise ModelFileError(f"{self.path}: tokenizer.ggml.merges is not a list of strings")
        declared = self.meta.get(f"{self.arch}.vocab_size")
        if declared is not None and declared != len(tokens):
            raise ModelFileError(f"{self.path}: {self.arch}.vocab_size is {_short_repr(declared)}, but "
                                 f"tokenizer.ggml.tokens has {len(tokens)} tokens")
        return len(tokens)


def describe_os_error(exc: OSError, path: Path | str) -> str:
    """What went wrong writing `path`, in words a user can act on: a full disk says so and
    how much room is left."""
    path = Path(path)
    code = exc.errno
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        free = _free_bytes(path)
        room = f"{human_size(free)} free" if free is not None else "free space unknown"
        if code == errno.ENOSPC:
            return f"the disk holding {path} is full ({room})"
        return f"the disk holding {path} is full for this user: the disk quota is used up ({room})"
    if code in (errno.EACCES, errno.EPERM):
        return f"Wren may not write {path} (permission denied)"
    if code == errno.EROFS:
        return f"the disk holding {path} is read-only"
    return f"writing {path} failed: {exc.strerror or exc}"


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def _short_repr(value: Any, limit: int = 80) -> str:
    if isinstance(value, (list, dict)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
