"""GGML block types: the table of types Wren runs, and an exact pure-torch dequantization.

`dequantize(raw, qtype, cols)` turns a GGUF tensor's bytes, `uint8 [rows, row_bytes]` in the
file's own row layout, into `float32 [rows, cols]` equal bit for bit to
`gguf.quants.dequantize` of the same bytes. Exactness comes from doing the same float32
operations in the same order: the fp16 scales are widened to float32, each sub-block scale
is one float32 product (`d * sc`), and each value is one product (`scale * q`), minus or
plus a float32 offset where the type has one. Integer steps (unpacking bits, subtracting a
type's zero point) are exact in any order, so they run on uint8/int8/int32 tensors. Blocks
are read as little-endian, as GGUF writes them.

Where a block's fp16 scale is itself inf or NaN (a corrupt file), the NaNs land where
numpy's do, but a NaN's sign and payload may differ for the types that add an offset.

The work is vectorized over blocks and done in row chunks of about `CHUNK_ELEMENTS` values,
so the temporaries stay a few MB whatever the tensor's size (a 128k x 2048 embedding table
needs only its float32 result). It runs on whatever device `raw` is on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from ...errors import ModelFileError, UnsupportedQuantization

QK_K = 256
# Values dequantized per chunk: big enough that torch's per-op overhead is small (measured
# on a 2-core Xeon), small enough that a chunk's temporaries stay a few MB. A GPU wants
# fewer, bigger launches.
CHUNK_ELEMENTS = 1 << 19
CUDA_CHUNK_ELEMENTS = 1 << 24

_Dequant = Callable[[torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class GGMLType:
    """One supported type: its GGUF id and name, values per block, bytes per block."""

    id: int
    name: str
    block_size: int
    type_size: int
    dequant: _Dequant  # (blocks uint8 [n, type_size], out float32 [n, block_size]) -> None


# Bit unpacking works on whole int32 words ("SWAR"): shifting a word and masking every
# byte with the same mask unpacks four bytes per element. The planes are then interleaved in
# 16-byte units (viewed as complex128, only ever copied, never computed on), so a stack of
# planes copies one 16-byte element per step instead of running torch's loop per block.
_MASKS = {1: 0x01010101, 2: 0x03030303, 4: 0x0F0F0F0F}


def _planes(packed: torch.Tensor, groups: int, width: int, bits: int) -> torch.Tensor:
    """[n, groups*width] bytes -> uint8 [n, groups, 8 // bits, width]: plane p holds bits
    p*bits .. p*bits + bits-1 of each byte (low nibbles then high ones, and so on).

    width must be a multiple of 16.
    """
    n = packed.shape[0]
    words = packed.clone(memory_format=torch.contiguous_format).view(torch.int32)
    # An arithmetic shift's sign fill lands only in bits that the mask clears.
    mask = _MASKS[bits]
    planes = [(words >> shift if shift else words) & mask for shift in range(0, 8, bits)]
    units = [p.view(torch.complex128).view(n, groups, width // 16) for p in planes]
    return torch.stack(units, dim=2).view(torch.uint8).view(n, groups, 8 // bits, width)


_HIGH_BIT_TABLES: dict[torch.device, torch.Tensor] = {}


def _high_bits(qh: torch.Tensor) -> torch.Tensor:
    """Q5_0/Q5_1's qh, int16 [n, 2] (a little-endian uint32 per block whose bit i is the
    fifth bit of value i), -> uint8 [n, 32] holding 16 * that bit, in value order.

    A 256-entry table maps each byte to its eight bits (times 16) as eight bytes.
    """
    table = _HIGH_BIT_TABLES.get(qh.device)
    if table is None:
        spread = [[((v >> k) & 1) << 4 for k in range(8)] for v in range(256)]
        table = torch.tensor(spread, dtype=torch.uint8, device=qh.device).view(torch.int64)
        _HIGH_BIT_TABLES[qh.device] = table = table.view(256)
    index = qh.view(torch.uint8).view(-1).to(torch.int32)
    return torch.index_select(table, 0, index).view(torch.uint8).view(-1, 32)


def _f16(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The fp16 field at byte `at` (even) of each block, widened to float32: [n, 1]."""
    field = blocks.view(torch.int16)[:, at // 2]
    return field.view(torch.float16).to(torch.float32).view(-1, 1)


def _int16_columns(blocks: torch.Tensor, at: int, count: int) -> torch.Tensor:
    """`count` int16 fields from byte `at` (even) of each block, as a contiguous [n, count]."""
    return torch.stack([blocks.view(torch.int16)[:, at // 2 + i] for i in range(count)], dim=1)


def _scale(out: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
           offset: torch.Tensor | None = None, minus: bool = False) -> None:
    """out = scale * q (+ or - offset), each step rounded to float32 as numpy does.

    q is an exact integer tensor; widening it first and multiplying in place runs on
    float32 vectors, where a mixed-dtype product takes torch's slower casting loop.
    """
    out.copy_(q)
    out.mul_(scale)
    if offset is None:
        return
    if minus:
        out.sub_(offset)
    else:
        out.add_(offset)


# --- 32-value block types ------------------------------------------------------------------


def _q4_0(b: torch.Tensor, out: torch.Tensor) -> None:
    # d: f16, qs: 16 bytes; value j is the low nibble of qs[j], value 16 + j the high one;
    # value = d * (q - 8).
    q = _planes(b[:, 2:18], 1, 16, 4).view(-1, 32).view(torch.int8) - 8
    _scale(out, q, _f16(b, 0))


def _q4_1(b: torch.Tensor, out: torch.Tensor) -> None:
    # d: f16, m: f16, qs: 16 bytes; value = d * q + m.
    _scale(out, _planes(b[:, 4:20], 1, 16, 4).view(-1, 32), _f16(b, 0), _f16(b, 2))


def _q5_0(b: torch.Tensor, out: torch.Tensor) -> None:
    # d: f16, qh: 4 bytes (bit i: the fifth bit of value i), qs: 16 bytes as in Q4_0;
    # value = d * (q - 16).
    q = _planes(b[:, 6:22], 1, 16, 4).view(-1, 32) | _high_bits(_int16_columns(b, 2, 2))
    _scale(out, q.view(torch.int8) - 16, _f16(b, 0))


def _q5_1(b: torch.Tensor, out: torch.Tensor) -> None:
    # d: f16, m: f16, qh: 4 bytes, qs: 16 bytes; value = d * q + m.
    q = _planes(b[:, 8:24], 1, 16, 4).view(-1, 32) | _high_bits(_int16_columns(b, 4, 2))
    _scale(out, q, _f16(b, 0), _f16(b, 2))


def _q8_0(b: torch.Tensor, out: torch.Tensor) -> None:
    # d: f16, qs: 32 int8; value = d * q.
    _scale(out, b[:, 2:34].view(torch.int8), _f16(b, 0))


# --- 256-value super-block types (k-quants) ------------------------------------------------


def _q2_k(b: torch.Tensor, out: torch.Tensor) -> None:
    # scales: 16 bytes (low nibble: scale, high nibble: min, of 16 values each), qs: 64
    # bytes of 2-bit values (in each half of 128 values, value 32s + j is bits 2s..2s+1 of
    # qs[32 * half + j]), d: f16, dmin: f16; value = (d * sc) * q - (dmin * m).
    n = b.shape[0]
    scales = b[:, 0:16]
    dl = (_f16(b, 80) * (scales & 15)).view(n, 16, 1)
    ml = (_f16(b, 82) * (scales >> 4)).view(n, 16, 1)
    q = _planes(b[:, 16:80], 2, 32, 2).view(n, 16, 16)
    _scale(out.view(n, 16, 16), q, dl, ml, minus=True)


def _q3_k_scales(packed: torch.Tensor) -> torch.Tensor:
    """Q3_K's 12 bytes -> sixteen 6-bit scales minus 32, int8 [n, 16]: the low 4 bits are
    the nibbles of bytes 0-7 (low nibbles first), the top 2 bits come from bytes 8-11
    (scale 4s + k from bits 2s..2s+1 of byte 8 + k)."""
    low, high = packed[:, 0:8], packed[:, 8:12]
    low = torch.cat((low & 15, low >> 4), dim=1)
    high = torch.cat((high & 3, (high >> 2) & 3, (high >> 4) & 3, high >> 6), dim=1)
    return (low | (high << 4)).view(torch.int8) - 32


def _q3_k(b: torch.Tensor, out: torch.Tensor) -> None:
    # hmask: 32 bytes (value 32i + j: bit i of hmask[j]), qs: 64 bytes of 2-bit values as
    # in Q2_K, scales: 12 bytes, d: f16; value = (d * sc) * (q - 4 * (1 - hbit)).
    n = b.shape[0]
    dl = (_f16(b, 108) * _q3_k_scales(b[:, 96:108])).view(n, 16, 1)
    ql = _planes(b[:, 32:96], 2, 32, 2).view(n, QK_K)
    hb = _planes(b[:, 0:32], 1, 32, 1).view(n, QK_K)
    q = (ql | (hb << 2)).view(torch.int8) - 4
    _scale(out.view(n, 16, 16), q.view(n, 16, 16), dl)


def _k_scale_min(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K's 12 bytes -> eight 6-bit scales and eight 6-bit mins, uint8 [n, 8] each.

    Bytes 0-3 hold scales 0-3 (low 6 bits), bytes 4-7 mins 0-3; bytes 8-11 hold the low 4
    bits of scales 4-7 (low nibble) and mins 4-7 (high nibble), whose top 2 bits are the
    top 2 bits of bytes 0-3 (scales) and 4-7 (mins). Computed on the three int32 words.
    """
    n = packed.shape[0]
    words = packed.clone(memory_format=torch.contiguous_format).view(torch.int32)
    s, m, lo = words[:, 0], words[:, 1], words[:, 2]
    sc = torch.stack((s & 0x3F3F3F3F, (lo & 0x0F0F0F0F) | ((s >> 2) & 0x30303030)), dim=1)
    mn = torch.stack((m & 0x3F3F3F3F, ((lo >> 4) & 0x0F0F0F0F) | ((m >> 2) & 0x30303030)),
                     dim=1)
    return sc.view(torch.uint8).view(n, 8), mn.view(torch.uint8).view(n, 8)


def _q4_k(b: torch.Tensor, out: torch.Tensor) -> None:
    # d: f16, dmin: f16, scales: 12 bytes, qs: 128 bytes; sub-block 2i + h (32 values)
    # is nibble h of qs[32i : 32i + 32]; value = (d * sc) * q - (dmin * m).
    n = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    dl = (_f16(b, 0) * sc).view(n, 8, 1)
    ml = (_f16(b, 2) * mn).view(n, 8, 1)
    q = _planes(b[:, 16:144], 4, 32, 4).view(n, 8, 32)
    _scale(out.view(n, 8, 32), q, dl, ml, minus=True)


def _q5_k(b: torch.Tensor, out: torch.Tensor) -> None:
    # As Q4_K with qh: 32 bytes before qs (128 bytes); bit i of qh[j] is the fifth bit of
    # value j of sub-block i.
    n = b.shape[0]
    sc, mn = _k_scale_min(b[:, 4:16])
    dl = (_f16(b, 0) * sc).view(n, 8, 1)
    ml = (_f16(b, 2) * mn).view(n, 8, 1)
    low = _planes(b[:, 48:176], 4, 32, 4).view(n, 8, 32)
    high = _planes(b[:, 16:48], 1, 32, 1).view(n, 8, 32)
    _scale(out.view(n, 8, 32), low | (high << 4), dl, ml, minus=True)


def _q6_k(b: torch.Tensor, out: torch.Tensor) -> None:
    # ql: 128 bytes (low 4 bits), qh: 64 bytes (high 2 bits), scales: 16 int8, d: f16;
    # value = (d * sc) * (q - 32). In each half of 128 values, value 64h + j takes nibble h
    # of ql[64 * half + j], value 32s + j takes bits 2s..2s+1 of qh[32 * half + j].
    n = b.shape[0]
    dl = (_f16(b, 208) * b[:, 192:208].view(torch.int8)).view(n, 16, 1)
    low = _planes(b[:, 0:128], 2, 64, 4).view(n, QK_K)
    high = _planes(b[:, 128:192], 2, 32, 2).view(n, QK_K)
    q = (low | (high << 4)).view(torch.int8) - 32
    _scale(out.view(n, 16, 16), q.view(n, 16, 16), dl)


# --- MXFP4 (OCP microscaling, 4-bit e2m1 values with an e8m0 block scale) -----------------

# e2m1's 16 codes doubled (so they are integers); the scale below is halved to match.
MXFP4 = int(GGMLQuantizationType.MXFP4)
MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)
# The largest e8m0 scale byte Wren accepts. 0xFF is NaN in OCP MX; 0xFD and 0xFE scale the
# block's largest values (+-6) past float32's range (to inf). 0xFC gives at most 6 * 2^125.
MXFP4_MAX_SCALE = 0xFC
_MXFP4_TABLES: dict[torch.device, torch.Tensor] = {}


def _e8m0_half(e: torch.Tensor) -> torch.Tensor:
    """uint8 scale bytes -> float32 2^(e - 128) as bits, exactly as gguf builds them: e < 2
    gives a subnormal (0x00200000 << e), else the exponent field e - 1."""
    e = e.to(torch.int32)
    bits = torch.where(e < 2, torch.bitwise_left_shift(torch.full_like(e, 0x00200000), e), (e - 1) << 23)
    return bits.view(torch.float32)


def mxfp4_bad_scale(raw: torch.Tensor) -> tuple[int, int, int] | None:
    """(row, block, scale byte) of the first MXFP4 block whose scale is out of range in
    GGUF rows `uint8 [rows, row_bytes]`, or None when every scale is in range."""
    scales = raw.reshape(raw.shape[0], -1, 17)[:, :, 0]
    bad = scales > MXFP4_MAX_SCALE
    if not bool(bad.any()):
        return None
    row, block = (int(i) for i in bad.nonzero()[0])
    return row, block, int(scales[row, block])


def check_mxfp4_scales(raw: torch.Tensor, what: str) -> None:
    """Raise ModelFileError naming `what`, the block and its scale if any MXFP4 block's
    scale byte is above MXFP4_MAX_SCALE (its values would be inf or NaN)."""
    found = mxfp4_bad_scale(raw)
    if found is None:
        return
    row, block, e = found
    meaning = "NaN in OCP MX" if e == 0xFF else f"2^{e - 127}, whose values overflow float32"
    raise ModelFileError(f"{what}: MXFP4 block {block} of row {row} has scale byte 0x{e:02X} ({meaning}); "
                         f"Wren accepts scale bytes up to 0x{MXFP4_MAX_SCALE:02X} (2^{MXFP4_MAX_SCALE - 127})")


def _mxfp4(b: torch.Tensor, out: torch.Tensor) -> None:
    # e: u8 scale, qs: 16 bytes; value j is the low nibble of qs[j], value 16 + j the high
    # one; value = 2^(e - 128) * (2 * e2m1[code]), one float32 product as gguf does.
    table = _MXFP4_TABLES.get(b.device)
    if table is None:
        table = _MXFP4_TABLES[b.device] = torch.tensor(MXFP4_VALUES, dtype=torch.int8, device=b.device)
    codes = _planes(b[:, 1:17], 1, 16, 4).view(-1, 32)
    _scale(out, table[codes.to(torch.int64)], _e8m0_half(b[:, 0:1]))


# --- plain float types ---------------------------------------------------------------------


def _f32(b: torch.Tensor, out: torch.Tensor) -> None:
    out.view(torch.uint8).view(b.shape).copy_(b)


def _bf16(b: torch.Tensor, out: torch.Tensor) -> None:
    # Widening a bfloat16 moves its 16 bits to the top of a float32 (NaN payloads too).
    out.copy_(b.view(torch.bfloat16))


def _f16_values(b: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(b.view(torch.float16))
    # torch's widening quiets signalling NaNs (exponent all ones, top mantissa bit clear)
    # where numpy keeps their bits. A NaN in the chunk makes the sum NaN (an inf may too,
    # harmlessly): only then look for them and rebuild sign, exponent, mantissa << 13.
    if not bool(torch.isnan(out.sum())):
        return
    h = b.view(torch.int16).to(torch.int32)
    snan = ((h & 0x7E00) == 0x7C00) & ((h & 0x01FF) != 0)
    exact = ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x03FF) << 13)
    bits = out.view(torch.int32)
    bits.copy_(torch.where(snan, exact, bits))


_T = GGMLQuantizationType
# In the order Wren's messages list them.
TYPES: dict[int, GGMLType] = {
    int(t): GGMLType(int(t), t.name, *GGML_QUANT_SIZES[t], fn)
    for t, fn in ((_T.F32, _f32), (_T.F16, _f16_values), (_T.BF16, _bf16), (_T.Q8_0, _q8_0),
                  (_T.Q4_0, _q4_0), (_T.Q4_1, _q4_1), (_T.Q5_0, _q5_0), (_T.Q5_1, _q5_1),
                  (_T.Q2_K, _q2_k), (_T.Q3_K, _q3_k), (_T.Q4_K, _q4_k), (_T.Q5_K, _q5_k),
                  (_T.Q6_K, _q6_k), (_T.MXFP4, _mxfp4))
}
SUPPORTED: frozenset[int] = frozenset(TYPES)
_RUNS = ", ".join(t.name for t in TYPES.values())


# Wren's own row layouts (not GGUF types): a file type's rows interleaved in groups for the
# kernels (csrc/repack.cpp). id -> (name, the file type, rows per group).
INTERLEAVED: dict[int, tuple[str, int, int]] = {
    40: ("Q4_0x8", int(_T.Q4_0), 8), 41: ("Q4_Kx8", int(_T.Q4_K), 8), 42: ("Q4_1x8", int(_T.Q4_1), 8),
    43: ("Q6_Kx8", int(_T.Q6_K), 8)}


def interleave(qtype: int) -> int:
    """Rows per group of an interleaved layout; 1 for a file type."""
    return INTERLEAVED[qtype][2] if qtype in INTERLEAVED else 1


def file_type(qtype: int) -> int:
    """The GGUF type an interleaved layout holds; a file type itself."""
    return INTERLEAVED[qtype][1] if qtype in INTERLEAVED else qtype


def unpack_interleaved(raw: torch.Tensor, qtype: int) -> tuple[torch.Tensor, int]:
    """An interleaved weight back in its file's row layout, bit for bit, on any device:
    (bytes, the file type). The layouts are described in csrc/wren_quant.h."""
    name, base, group = INTERLEAVED[qtype]
    rows, width = raw.shape
    groups = rows // group
    if name in ("Q4_0x8", "Q4_1x8"):  # per block: 8 fp16 scales (and 8 minimums), 4 chunks of 8 rows x 4 bytes
        fields = 2 if name == "Q4_1x8" else 1
        size = 2 * fields + 16
        nb = width // size
        blocks = raw.reshape(groups, nb, group * size)
        heads = blocks[:, :, :16 * fields].reshape(groups, nb, fields, group, 2).permute(0, 3, 1, 2, 4)
        quants = blocks[:, :, 16 * fields:].reshape(groups, nb, 4, group, 4).permute(0, 3, 1, 2, 4)
        out = torch.cat([heads.reshape(groups, group, nb, 2 * fields), quants.reshape(groups, group, nb, 16)], dim=-1)
        return out.reshape(rows, width).contiguous(), base
    if name == "Q6_Kx8":  # per super-block: 8 d, the scales in row pairs, 32 chunks of ql, 16 of qh
        nb = width // 210
        blocks = raw.reshape(groups, nb, group * 210)
        d = blocks[:, :, :16].reshape(groups, nb, group, 2).permute(0, 2, 1, 3)
        scales = blocks[:, :, 16:144].reshape(groups, nb, 8, group, 2).permute(0, 3, 1, 2, 4)
        ql = blocks[:, :, 144:1168].reshape(groups, nb, 32, group, 4).permute(0, 3, 1, 2, 4)
        qh = blocks[:, :, 1168:].reshape(groups, nb, 16, group, 4).permute(0, 3, 1, 2, 4)
        out = torch.cat([ql.reshape(groups, group, nb, 128), qh.reshape(groups, group, nb, 64),
                         scales.reshape(groups, group, nb, 16), d], dim=-1)
        return out.reshape(rows, width).contiguous(), base
    # Q4_Kx8, per super-block: d, dmin, the decoded scales and minimums, 32 chunks of quants
    nb = width // 144
    blocks = raw.reshape(groups, nb, group * 144).to(torch.int32)
    d = blocks[:, :, :16].reshape(groups, nb, group, 2)
    dmin = blocks[:, :, 16:32].reshape(groups, nb, group, 2)
    low = blocks[:, :, 32:96].reshape(groups, nb, 8, group)  # [.., sub-block, row]
    high = blocks[:, :, 96:128].reshape(groups, nb, 8, group // 2, 1)
    high = ((high >> torch.tensor([0, 4], device=raw.device)) & 15).reshape(groups, nb, 8, group)
    sc = (low & 15) | ((high & 3) << 4)
    mn = (low >> 4) | ((high >> 2) << 4)
    packed = torch.cat([sc[:, :, :4] | ((sc[:, :, 4:] >> 4) << 6), mn[:, :, :4] | ((mn[:, :, 4:] >> 4) << 6),
                        (sc[:, :, 4:] & 15) | ((mn[:, :, 4:] & 15) << 4)], dim=2).permute(0, 3, 1, 2)
    quants = blocks[:, :, 128:].reshape(groups, nb, 32, group, 4).permute(0, 3, 1, 2, 4)
    out = torch.cat([d.permute(0, 2, 1, 3), dmin.permute(0, 2, 1, 3), packed,
                     quants.reshape(groups, group, nb, 128)], dim=-1)
    return out.to(torch.uint8).reshape(rows, width).contiguous(), base


def type_name(qtype: int) -> str:
    """GGUF's name for a type id ("Q4_K"), supported or not; "type N" for an unknown id."""
    if qtype in INTERLEAVED:
        return INTERLEAVED[qtype][0]
    try:
        return _T(qtype).name
    except ValueError:
        return f"type {qtype}"


def _sizes(qtype: int) -> tuple[int, int]:
    qtype = file_type(qtype)
    try:
        return GGML_QUANT_SIZES[_T(qtype)]
    except (ValueError, KeyError):
        raise ValueError(f"{type_name(qtype)} is not a GGML type with a known block size") from None


def block_size(qtype: int) -> int:
    """Values per block (1 for F32/F16/BF16, 32 or 256 for the block types); any GGML type."""
    return _sizes(qtype)[0]


def type_size(qtype: int) -> int:
    """Bytes per block; any GGML type."""
    return _sizes(qtype)[1]


def row_bytes(qtype: int, cols: int) -> int:
    """Bytes a row of `cols` values takes in GGUF's row layout."""
    block, size = _sizes(qtype)
    if cols < 0 or cols % block:
        raise ValueError(f"a {type_name(qtype)} row holds whole blocks of {block} values; "
                         f"{cols} columns is not a multiple of {block}")
    return cols // block * size


def check_supported(qtype: int, tensor_name: str, where: str) -> None:
    """Raise UnsupportedQuantization naming the file, tensor and type unless Wren runs it."""
    if qtype not in SUPPORTED:
        raise UnsupportedQuantization(f"{where}: tensor {tensor_name} is {type_name(qtype)}, "
                                      f"which Wren cannot run (it runs {_RUNS})")


def dequantize(raw: torch.Tensor, qtype: int, cols: int, *,
               chunk_elements: int | None = None) -> torch.Tensor:
    """GGUF rows `uint8 [rows, row_bytes]` -> a new `float32 [rows, cols]` on raw's device.

    Equal bit for bit to `gguf.quants.dequantize(raw.numpy(), qtype)`. Work goes in chunks
    of whole rows of about `chunk_elements` values (at least one row; by default
    CHUNK_ELEMENTS, or CUDA_CHUNK_ELEMENTS on a GPU), which bounds the temporaries; the
    result does not depend on the chunking.
    """
    if qtype in INTERLEAVED:
        raw, qtype = unpack_interleaved(raw, qtype)
    t = TYPES.get(int(qtype))
    if t is None:
        raise UnsupportedQuantization(
            f"cannot dequantize {type_name(qtype)}: Wren runs only {_RUNS}")
    expected = row_bytes(qtype, cols)
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.shape[1] != expected:
        raise ValueError(f"dequantize({t.name}, cols={cols}) needs uint8 [rows, {expected}] "
                         f"bytes; got {raw.dtype} {list(raw.shape)}")
    if qtype == _T.MXFP4:
        check_mxfp4_scales(raw, "dequantize")
    rows = raw.shape[0]
    out = torch.empty(rows, cols, dtype=torch.float32, device=raw.device)
    if rows == 0 or cols == 0:
        return out
    if not raw.is_contiguous() or raw.storage_offset() % 4:
        raw = raw.clone(memory_format=torch.contiguous_format)  # the fields are read as int16/32
    if chunk_elements is None:
        chunk_elements = CUDA_CHUNK_ELEMENTS if raw.is_cuda else CHUNK_ELEMENTS
    step = max(1, chunk_elements // cols)
    blocks_per_row = cols // t.block_size
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        n = (stop - start) * blocks_per_row
        t.dequant(raw[start:stop].view(n, t.type_size), out[start:stop].view(n, t.block_size))
    return out
