"""Import a llama-family GGUF file as a model folder Wren's backends load.

The folder keeps the GGUF itself as `model.gguf`, byte for byte (docs/weights.md): the
torch backend computes on its quantized blocks as they are, so nothing is converted or
widened. Beside it go the files that describe it in Hugging Face's terms: config.json,
generation_config.json, tokenizer.json and tokenizer_config.json (the chat template).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import LlamaFileType

from ..chat_template import validate_chat_template
from ..errors import ModelFileError, UnsupportedArchitecture, UnsupportedQuantization
from ..inference import families
from ..inference.families import Family
from ..paths import make_dirs, private_dir
from .gguf_file import GGUFFile, TensorInfo
from .gguf_header import HEADER_PROBE_BYTES, gguf_header_length
from .gguf_tokenizer import END_OF_TURN_TOKENS, build_tokenizer
from .private_copy import copy_private
from .validate import describe_os_error, validate_llama_gguf

Progress = Callable[[int, int], None]

# Bump when the output changes, so cached imports (the starter) are rebuilt.
# 2: the GGUF is kept as model.gguf (1 converted it to float32 safetensors); 3: the
# starter's generation_config.json carries its card's sampling advice.
IMPORTER_VERSION = 3
GGUF_FILE = "model.gguf"

# llama.cpp-only tensors that HF models derive from config instead
_SKIPPED = re.compile(r"^(rope_freqs|rope_factors_long|rope_factors_short|blk\.\d+\.attn_rot_embd)\.weight$")
_LAYER_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


@dataclass(frozen=True)
class ImportSummary:
    architecture: str  # HF model_type
    context_length: int
    parameters: int
    quantization: str  # e.g. "Q4_1", "Q4_K_M", "F16"
    display_name: str | None
    # Each weight file's size and CRC-32, recorded so a load can find damage (file_checksum).
    checksums: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedTensor:
    """Where a GGUF tensor goes: its HF name, and how many rotary heads its rows are
    interleaved over (llama.cpp's Q/K order; 0: rows kept as they are)."""
    hf_name: str
    source: TensorInfo
    unpermute_heads: int = 0


def import_gguf(source: Path | str, dest: Path | str, *, progress: Progress | None = None,
                move: bool = False) -> ImportSummary:
    """Import `source` into the new folder `dest`, which appears only once complete."""
    with staging_dir(Path(dest)) as tmp:
        return convert_gguf(source, tmp, progress=progress, move=move)


PARTIAL_PREFIX = ".partial-"
LOCK_SUFFIX = ".lock"


@contextmanager
def staging_dir(dest: Path) -> Iterator[Path]:
    """An empty hidden sibling of `dest`, renamed to `dest` on success and deleted on failure,
    so an interrupted import never leaves a half-made model where the registry looks.

    While it is written, the folder's owner holds an OS lock on `<folder>.lock` (taken
    before the folder exists, dropped after it is renamed): a start-up sweep removes a
    `.partial-` folder only when that lock is free, i.e. its writer was killed."""
    from ..store.locks import HeldLock

    if dest.exists():
        raise FileExistsError(f"{dest} already exists")
    make_dirs(dest.parent)
    tmp = dest.parent / f"{PARTIAL_PREFIX}{dest.name}-{uuid.uuid4().hex[:8]}"
    lock = HeldLock(tmp.with_name(tmp.name + LOCK_SUFFIX))
    try:
        private_dir(tmp)  # renamed to the model's folder: 0700, whatever the umask
        try:
            yield tmp
            try:
                os.rename(tmp, dest)
            except OSError as exc:
                raise FileExistsError(f"{dest} appeared while it was being created") from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        lock.release()


def check_runnable(source: Path | str) -> ImportSummary:
    """Everything an import checks, without writing anything: the header and tensor table
    only (no tensor data is read), so a sparse file holding just a download's first bytes
    will do."""
    with GGUFFile(source) as gguf:
        _, config, plan = _inspect(gguf)
        _, tok_config = build_tokenizer(gguf.metadata, gguf.label, config["max_position_embeddings"])
        _validate_template(tok_config, gguf)
        return _summary(gguf, config, plan)


def check_prefix(prefix: bytes, size: int, workdir: Path, label: str) -> None:
    """`check_runnable` on a file of `size` bytes of which only `prefix` (its whole header)
    is at hand: a sparse copy in `workdir` (the tensor data holes, taking no disk), removed
    after. Errors name `label` instead of the copy."""
    probe_dir = private_dir(workdir / "probe")
    probe = probe_dir / "header.gguf"
    try:
        try:
            with open(probe, "wb") as fh:
                fh.write(prefix)
            os.truncate(probe, size)
        except OSError as exc:  # a full disk, say
            raise ModelFileError(describe_os_error(exc, probe_dir)) from exc
        try:
            check_runnable(probe)
        except (UnsupportedArchitecture, UnsupportedQuantization, ModelFileError) as exc:
            raise type(exc)(_name_the_file(str(exc), probe, label)) from exc
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)


def _name_the_file(message: str, probe: Path, label: str) -> str:
    """An error about the sparse probe file, reworded to name the file it stands for."""
    if str(probe) in message:
        return message.replace(str(probe), label)
    if probe.name in message:
        return message.replace(probe.name, label, 1)
    return f"{label}: {message}"


def check_before_copy(source: Path, workdir: Path) -> None:
    """Check a local GGUF's header before its bytes are copied: a file Wren cannot run is
    refused in a moment, not after a copy of many GB (the bar reached 100% first). Read with
    plain reads, never mapped, so a file that shrinks meanwhile cannot crash Wren; the copy
    is checked again once it is made (convert_gguf)."""
    if not source.is_file():
        raise ModelFileError(f"{source} does not exist" if not source.exists() else f"{source} is not a file")
    try:
        size = source.stat().st_size
        want = min(HEADER_PROBE_BYTES, size)
        with open(source, "rb") as fh:
            while True:
                fh.seek(0)
                prefix = fh.read(want)
                if gguf_header_length(prefix, size) is not None or want >= size or len(prefix) < want:
                    break
                want = min(want * 2, size)
    except OSError as exc:
        raise ModelFileError(_os_error_message(exc, source)) from exc
    check_prefix(prefix, size, workdir, str(source))


def convert_gguf(source: Path | str, out_dir: Path, *, progress: Progress | None = None,
                 move: bool = False) -> ImportSummary:
    """Write the model folder for `source` into the existing, empty `out_dir`: first the GGUF
    itself, as a private copy (or moved there with `move`), then, from that copy alone, the
    checks and the config and tokenizer files.

    The user's file is read once, front to back, and never mapped: a file cut short, rewritten
    or deleted meanwhile cannot crash the import (a mapped file that shrinks raises SIGBUS),
    a change during the copy is refused, and what is checked is exactly what is installed."""
    source = Path(source)
    target = out_dir / GGUF_FILE
    if not move:  # a download (moved) had its header checked before it came
        check_before_copy(source, out_dir)
    moved, crc = _place_file(source, target, move, progress)
    try:
        summary = _describe_copy(target, source, out_dir)
    except BaseException:
        if moved:  # give a refused download back, as it was before the move
            with suppress(OSError):
                os.replace(target, source)
        raise
    try:
        size = target.stat().st_size
        if crc is None:  # moved: read once for it
            crc = int((file_checksum(target) or {"crc32": "0"})["crc32"], 16)
    except OSError as exc:
        raise ModelFileError(_os_error_message(exc, target)) from exc
    return replace(summary, checksums={GGUF_FILE: {"size": size, "crc32": f"{crc:08x}"}})


def _describe_copy(copy: Path, source: Path, out_dir: Path) -> ImportSummary:
    """Check the copy and write its config and tokenizer files; messages name `source`."""
    with GGUFFile(copy, label=source) as gguf:
        _, config, plan = _inspect(gguf)
        tokenizer, tok_config = build_tokenizer(gguf.metadata, gguf.label, config["max_position_embeddings"])
        _validate_template(tok_config, gguf)
        try:
            tokenizer.save(str(out_dir / "tokenizer.json"))
            for key in ("bos_token", "eos_token"):
                token = tok_config.get(key)
                config[f"{key}_id"] = tokenizer.token_to_id(token) if token else None
            _write_json(out_dir / "tokenizer_config.json", tok_config)
            _write_json(out_dir / "config.json", config)
            _write_json(out_dir / "generation_config.json", _generation_config(tokenizer, config, gguf))
        except OSError as exc:
            raise ModelFileError(_os_error_message(exc, out_dir)) from exc
        return _summary(gguf, config, plan)


CHECK_CHUNK = 8 << 20


def file_checksum(path: Path, cancel: Any = None) -> dict[str, Any] | None:
    """`path`'s size and CRC-32 (the record's form); None if `cancel` (an Event) was set.
    CRC-32 finds damage, not tampering: about 1 GB/s on one core, so a load can check a
    model's whole file in the background (a cryptographic hash is 5-8 times slower here)."""
    crc = 0
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHECK_CHUNK):
            if cancel is not None and cancel.is_set():
                return None
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return {"size": size, "crc32": f"{crc:08x}"}


def _inspect(gguf: GGUFFile) -> tuple[str, dict[str, Any], list[PlannedTensor]]:
    arch = gguf.metadata.get("general.architecture")
    family = families.find_architecture(arch)
    if family is None or not isinstance(arch, str):  # (a known architecture is a name)
        raise UnsupportedArchitecture(
            f"{gguf.label} is a {arch!r} model; Wren imports {', '.join(families.architectures())} GGUF files"
        )
    validate_llama_gguf(gguf, arch)
    config = _model_config(gguf, arch, family)
    plan = plan_tensors(gguf, arch, config)
    config["torch_dtype"] = "float32"  # the activations; the weights keep the file's blocks
    return arch, config, plan


def _validate_template(tok_config: dict[str, Any], gguf: GGUFFile) -> None:
    """Render the model's chat template once, within its time and size limits, so a bad
    one is reported at import with the model's name rather than at the first Send."""
    template = tok_config.get("chat_template")
    if isinstance(template, str):
        validate_chat_template(template, gguf.metadata.get("general.name") or gguf.label.name)


def _summary(gguf: GGUFFile, config: dict[str, Any], plan: list[PlannedTensor]) -> ImportSummary:
    name = gguf.metadata.get("general.name")
    return ImportSummary(
        architecture=config["model_type"],
        context_length=config["max_position_embeddings"],
        parameters=sum(p.source.n_elements for p in plan),
        quantization=_quantization_label(gguf),
        display_name=name[:256] if isinstance(name, str) else None,
    )


def _place_file(source: Path, dest: Path, move: bool, progress: Progress | None) -> tuple[bool, int | None]:
    """Put the GGUF at `dest`: a rename where `move` allows, else a private copy in chunks
    (reporting progress) whose failure says plainly what went wrong. Returns whether it was
    renamed, and the copy's CRC-32 (computed from the bytes written; None after a rename)."""
    if move:
        try:
            total = source.stat().st_size
            os.replace(source, dest)
        except OSError:
            pass  # another file system: copy, then remove the original below
        else:
            if progress:
                progress(0, total)
                progress(total, total)
            return True, None
    crc = copy_private(source, dest, progress)
    if move:
        source.unlink(missing_ok=True)
    return False, crc


def _os_error_message(exc: OSError, path: Path) -> str:
    return describe_os_error(exc, path) + "; the import was undone"


def _model_config(gguf: GGUFFile, arch: str, family: Family) -> dict[str, Any]:
    meta = gguf.metadata

    def need(key: str) -> Any:
        value = meta.get(f"{arch}.{key}")
        if value is None:
            raise ModelFileError(f"{gguf.label} lacks the metadata key {arch}.{key}")
        return _uniform(value, f"{arch}.{key}", gguf.label)

    def opt(key: str, default: Any) -> Any:
        value = meta.get(f"{arch}.{key}")
        return default if value is None else _uniform(value, f"{arch}.{key}", gguf.label)

    if opt("expert_count", 0) and not family.experts:
        raise UnsupportedArchitecture(f"{gguf.label} is a mixture-of-experts {arch} model, which Wren cannot run")
    hidden, heads = need("embedding_length"), need("attention.head_count")
    head_dim = opt("attention.key_length", hidden // heads)
    if (opt("attention.value_length", head_dim) != head_dim
            or (opt("rope.dimension_count", head_dim) != head_dim and not family.partial_rotary)):
        raise UnsupportedArchitecture(f"{gguf.label} uses partial RoPE or unequal key/value sizes")
    embed = gguf.tensors.get("token_embd.weight")
    if embed is None:
        raise ModelFileError(f"{gguf.label} has no token_embd.weight tensor")
    theta = float(opt("rope.freq_base", 10000.0))
    config: dict[str, Any] = {
        "architectures": [family.hf_class],
        "model_type": family.model_type,
        "hidden_size": hidden,
        # a mixture's experts have their own size (the family's gguf_config)
        "intermediate_size": opt("feed_forward_length", 0) if family.experts else need("feed_forward_length"),
        "num_hidden_layers": need("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": opt("attention.head_count_kv", heads),
        "head_dim": head_dim,
        "hidden_act": "silu",
        # metadata floats are float32; print them as the short decimals model cards use
        "rms_norm_eps": _short_float(opt("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": _short_float(theta),
        "rope_scaling": _rope_scaling(gguf, arch, theta, head_dim),
        "max_position_embeddings": opt("context_length", 2048),
        "vocab_size": embed.shape[0],
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        "attention_dropout": 0.0,
    }
    config.update(family.gguf_config(opt, gguf.tensors.keys()))
    return config


def _rope_scaling(gguf: GGUFFile, arch: str, theta: float, head_dim: int) -> dict[str, Any] | None:
    meta = gguf.metadata
    kind = meta.get(f"{arch}.rope.scaling.type")
    factor = meta.get(f"{arch}.rope.scaling.factor")
    if kind in ("linear", "yarn") and factor:
        scaling: dict[str, Any] = {"rope_type": kind, "factor": _short_float(factor)}
        original = meta.get(f"{arch}.rope.scaling.original_context_length")
        if kind == "yarn" and original:
            scaling["original_max_position_embeddings"] = original
        return scaling
    if kind not in (None, "none"):
        raise UnsupportedArchitecture(f"{gguf.label} uses RoPE scaling {kind!r}")
    if "rope_factors_long.weight" in gguf.tensors:
        return _longrope_scaling(gguf, arch)
    if "rope_freqs.weight" in gguf.tensors:
        return _llama3_scaling(gguf, theta, head_dim)
    return None


def _longrope_scaling(gguf: GGUFFile, arch: str) -> dict[str, Any]:
    """LongRoPE (phi3): llama.cpp stores its two tables of per-frequency factors as tensors
    and the scale of the rotated part of q and k as rope.scaling.attn_factor; config.json
    keeps them as transformers does (with the original length at the top level too: the
    family's gguf_config writes it)."""
    meta = gguf.metadata
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if "rope_factors_short.weight" not in gguf.tensors or not original:
        raise ModelFileError(f"{gguf.label} has rope_factors_long.weight but not rope_factors_short.weight and "
                             f"{arch}.rope.scaling.original_context_length, which LongRoPE needs")
    scaling: dict[str, Any] = {"rope_type": "longrope", "type": "longrope", "original_max_position_embeddings": original}
    for which in ("long", "short"):
        factors = np.asarray(gguf.read(f"rope_factors_{which}.weight"), dtype=np.float64).reshape(-1)
        scaling[f"{which}_factor"] = [_short_float(f) for f in factors]
    stretch = float(meta.get(f"{arch}.context_length") or original) / original
    implied = math.sqrt(1 + math.log(stretch) / math.log(original)) if stretch > 1 else 1.0
    stored = meta.get(f"{arch}.rope.scaling.attn_factor")
    if stored is not None and not math.isclose(stored, implied, rel_tol=1e-6):
        scaling["attention_factor"] = _short_float(stored)  # a file's own scale over the implied one
    return scaling


def _llama3_scaling(gguf: GGUFFile, theta: float, head_dim: int) -> dict[str, Any]:
    """Llama 3.1+ GGUFs store per-frequency factors instead of the rope_scaling parameters;
    every Llama 3.x release uses the same low/high factors and window, so only `factor` is
    read back, and the stored table is checked against the one those parameters make."""
    stored = np.asarray(gguf.read("rope_freqs.weight"), dtype=np.float64).reshape(-1)
    scaling: dict[str, Any] = {"rope_type": "llama3", "factor": _short_float(stored.max()), "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    window, low, high, factor = 8192, 1.0, 4.0, scaling["factor"]
    smooth = (window / wavelen - low) / (high - low)
    expected = np.where(wavelen < window / high, 1.0,
                        np.where(wavelen > window / low, factor, 1 / ((1 - smooth) / factor + smooth)))
    if expected.shape != stored.shape or not np.allclose(expected, stored, rtol=1e-4):
        raise UnsupportedArchitecture(f"{gguf.label} has a rope_freqs table Wren does not recognise")
    return scaling


def plan_tensors(gguf: GGUFFile, arch: str, config: dict[str, Any]) -> list[PlannedTensor]:
    """Map every tensor to its HF name, failing before anything is written: an unknown
    tensor, or a type Wren cannot compute with, names the tensor and the type."""
    from ..inference.quant.ggml import check_supported

    family = families.by_architecture(arch)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    permute = family.permuted_qk
    plan: list[PlannedTensor] = []
    for info in gguf.tensors.values():
        if _SKIPPED.match(info.name):
            continue
        hf_name = family.global_tensors.get(info.name)
        part = None
        if hf_name is None:
            match = _LAYER_RE.match(info.name)
            if match is None or match.group(2) not in family.layer_tensors:
                raise UnsupportedArchitecture(f"{gguf.label} has a tensor Wren does not know: {info.name}")
            layer, part, kind = match.groups()
            hf_name = f"model.layers.{layer}.{family.layer_tensors[part]}.{kind}"
        check_supported(info.ggml_type, info.name, str(gguf.label))
        unpermute = {"attn_q": heads, "attn_k": kv_heads}.get(part or "", 0) if permute else 0  # (a global tensor: no part)
        plan.append(PlannedTensor(hf_name, info, unpermute))
    return plan


def unpermute_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K permutation: within each head GGUF interleaves the two rotary
    halves row by row (Meta's layout); HF's rotate-half layout keeps each half contiguous."""
    rows = weight.shape[0]
    if rows % (2 * n_heads):
        raise ModelFileError(f"cannot split {rows} rows into {n_heads} rotary heads")
    head = rows // n_heads
    return weight.reshape(n_heads, head // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _generation_config(tokenizer: Any, config: dict[str, Any], gguf: GGUFFile) -> dict[str, Any]:
    eos = [config["eos_token_id"]] if config.get("eos_token_id") is not None else []
    for token in END_OF_TURN_TOKENS:
        idx = tokenizer.token_to_id(token)
        if idx is not None and idx not in eos:
            eos.append(idx)
    generation: dict[str, Any] = {
        "bos_token_id": config.get("bos_token_id"),
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
    }
    # The sampling its authors recommend, where the file records it (general.sampling.*).
    for key, name, kind in (("temp", "temperature", float), ("top_k", "top_k", int), ("top_p", "top_p", float),
                            ("min_p", "min_p", float), ("penalty_repeat", "repetition_penalty", float)):
        value = gguf.metadata.get(f"general.sampling.{key}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            generation[name] = kind(value)
    return generation


def _quantization_label(gguf: GGUFFile) -> str:
    file_type = gguf.metadata.get("general.file_type")
    try:
        label = LlamaFileType(file_type).name if file_type is not None else "GUESSED"
    except ValueError:
        label = "GUESSED"
    if label != "GUESSED":
        return label.removeprefix("MOSTLY_").removeprefix("ALL_")
    # otherwise name it after the type holding most of the bytes
    by_type: dict[str, int] = {}
    for info in gguf.tensors.values():
        by_type[info.type_name] = by_type.get(info.type_name, 0) + info.n_bytes
    return max(by_type, key=by_type.__getitem__)


def _uniform(value: Any, key: str, path: Path) -> Any:
    """Some GGUFs store per-layer lists; Wren's models need one value for all layers."""
    if isinstance(value, list):
        if not value or any(v != value[0] for v in value):
            raise UnsupportedArchitecture(f"{path} varies {key} across layers, which Wren cannot run")
        return value[0]
    return value


def _short_float(value: float) -> float:
    return float(f"{float(value):.7g}")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
