"""Read a GGUF file's metadata and tensors, with errors that name the file and the fault.

The `gguf` package's reader fails on damaged files with bare ValueErrors, so the container
is parsed here and only dequantization is left to `gguf.quants`.
"""

from __future__ import annotations

import functools
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from ..errors import ModelFileError, UnsupportedQuantization

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
# ggml tensors have at most 4 dimensions; more means the header is garbage.
_MAX_DIMS = 4
# Bounds on what a header may declare, so a damaged or hostile file fails at once instead of
# looping or allocating on the strength of a count it does not back with bytes.
_MAX_ARRAY_DEPTH = 4  # GGUF allows arrays of arrays; real files nest one level at most
_MAX_ARRAY_ITEMS = 1 << 24  # all metadata arrays together (a 256k vocab's arrays are ~1M)
_MAX_ELEMENTS = 1 << 48  # values in one tensor
_MAX_KEY_BYTES = 65535  # the GGUF spec's limit on a metadata key
_MAX_TENSOR_NAME_BYTES = 256  # ggml allows 63; leave room for forks
_MAX_ALIGNMENT = 1 << 16
# The fewest bytes an entry can take, for checking a declared count against the bytes left:
# a metadata entry is a key length, a value type and at least one byte of value; a tensor
# entry is a name length, a dimension count, a type and an offset.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8

# GGUF metadata value types -> struct format (strings and arrays handled separately).
_SCALARS: dict[int, str] = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}
_STRING, _ARRAY = 8, 9
_NUMPY_OF_SCALAR: dict[int, str] = {
    0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8",
    11: "<i8", 12: "<f8",
}
_STRUCTS = {vtype: struct.Struct("<" + fmt) for vtype, fmt in _SCALARS.items()}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    # numpy order (rows first), the reverse of ggml's ne[] order stored in the file
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute offset of the data in the file
    n_bytes: int

    @property
    def type_name(self) -> str:
        try:
            return GGMLQuantizationType(self.ggml_type).name
        except ValueError:
            return f"GGML type {self.ggml_type}"

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


class _Cursor:
    """Sequential reads over the mapped header that turn running off the end, or a count
    the remaining bytes cannot hold, into a clear error before anything is allocated."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf = buf
        self.end = len(buf)
        self.pos = 0
        self.path = path
        self.items_left = _MAX_ARRAY_ITEMS

    def _truncated(self, n: int, what: str) -> ModelFileError:
        return ModelFileError(
            f"{self.path} is truncated: its header needs {n} more bytes for {what} at byte "
            f"{self.pos}, but the file ends at byte {self.end}"
        )

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise self._truncated(n, what)

    def count(self, n: int, min_bytes: int, what: str) -> None:
        """Check that `n` entries of at least `min_bytes` each fit in what is left."""
        left = self.end - self.pos
        if n * min_bytes > left:
            raise ModelFileError(
                f"{self.path} is truncated or corrupt: its header declares {n} {what}, which need at "
                f"least {n * min_bytes} bytes, but only {left} bytes follow byte {self.pos}"
            )

    def u32(self, what: str) -> int:
        self._need(4, what)
        (value,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self._need(8, what)
        (value,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return value

    def string(self, what: str, limit: int | None = None) -> str:
        length = self.u64(what)
        if limit is not None and length > limit:
            raise ModelFileError(
                f"{self.path} is corrupt: {what} at byte {self.pos - 8} is {length} bytes long; "
                f"at most {limit} are allowed"
            )
        self._need(length, what)
        raw = self.buf[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        packer = _STRUCTS.get(vtype)
        if packer is not None:
            self._need(packer.size, what)
            (value,) = packer.unpack_from(self.buf, self.pos)
            self.pos += packer.size
            return value
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            return self._array(what, depth + 1)
        raise ModelFileError(f"{self.path} is corrupt: unknown metadata type {vtype} in {what}")

    def _array(self, what: str, depth: int) -> list[Any]:
        if depth > _MAX_ARRAY_DEPTH:
            raise ModelFileError(
                f"{self.path} is corrupt: {what} nests arrays more than {_MAX_ARRAY_DEPTH} deep"
            )
        item_type = self.u32(what)
        count = self.u64(what)
        if count > self.items_left:
            raise ModelFileError(
                f"{self.path} is corrupt: {what} declares an array of {count} items; Wren reads at "
                f"most {_MAX_ARRAY_ITEMS} metadata array items in all"
            )
        if item_type in _NUMPY_OF_SCALAR:
            # token types and scores are long numeric arrays: read them in one go
            dtype = np.dtype(_NUMPY_OF_SCALAR[item_type])
            self._need(count * dtype.itemsize, what)
            arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
            self.pos += count * dtype.itemsize
            self.items_left -= count
            return arr.tolist()
        if item_type == _STRING:
            self.count(count, 8, f"strings in {what}")
            self.items_left -= count
            return self._strings(count, what)
        if item_type == _ARRAY:
            self.count(count, 12, f"arrays in {what}")
            self.items_left -= count
            return [self._array(what, depth + 1) for _ in range(count)]
        raise ModelFileError(f"{self.path} is corrupt: unknown metadata type {item_type} in {what}")

    def _strings(self, count: int, what: str) -> list[str]:
        # A vocabulary is 100k+ strings: one tight loop, no call per item.
        buf, pos, end, unpack = self.buf, self.pos, self.end, _U64.unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            if pos + 8 > end:
                break
            (length,) = unpack(buf, pos)
            pos += 8
            stop = pos + length
            if stop > end:
                pos -= 8
                break
            append(buf[pos:stop].decode("utf-8", errors="replace"))
            pos = stop
        self.pos = pos
        if len(out) < count:
            raise self._truncated(8 if pos + 8 > end else _U64.unpack_from(buf, pos)[0] + 8,
                                  f"string #{len(out)} of {what}")
        return out


class GGUFFile:
    """An opened GGUF file: `metadata` (key -> value) and `tensors` (name -> TensorInfo).

    Opening checks the whole layout, so a truncated download fails here, before any work.
    """

    def __init__(self, path: Path | str, *, label: Path | str | None = None) -> None:
        self.path = Path(path)
        # the file its messages name: an import checks its private copy, but the user knows
        # the file they picked
        self.label = Path(label) if label is not None else self.path
        if not self.path.exists():
            raise ModelFileError(f"{self.label} does not exist")
        if not self.path.is_file():
            raise ModelFileError(f"{self.label} is not a file")
        try:
            with open(self.path, "rb") as fh:
                size = self.path.stat().st_size
                if size < 4:
                    raise ModelFileError(f"{self.label} is not a GGUF file (it is {size} bytes long)")
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise ModelFileError(f"{self.label} cannot be read: {exc.strerror or exc}") from exc
        self.file_size = len(self._map)
        self.metadata: dict[str, Any] = {}
        self.tensors: dict[str, TensorInfo] = {}
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:
            # arrays returned by raw()/read() still view the map; it closes when they go
            pass

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parse(self) -> None:
        cur = _Cursor(self._map, self.label)
        magic = bytes(self._map[:4])
        if magic != _MAGIC:
            raise ModelFileError(f"{self.label} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
        cur.pos = 4
        version = cur.u32("the version")
        if version & 0xFFFF == 0 and version != 0:
            raise ModelFileError(f"{self.label} is a big-endian GGUF file, which Wren cannot read")
        if version not in (2, 3):
            raise ModelFileError(f"{self.label} has GGUF version {version}; Wren reads versions 2 and 3")
        n_tensors = cur.u64("the tensor count")
        n_kv = cur.u64("the metadata count")
        cur.count(n_kv, _MIN_KV_BYTES, "metadata entries")
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}", _MAX_KEY_BYTES)
            vtype = cur.u32(f"the type of {key}")
            if key in self.metadata:
                raise ModelFileError(f"{self.label} is corrupt: metadata key {key} appears twice")
            self.metadata[key] = cur.value(vtype, key)

        cur.count(n_tensors, _MIN_TENSOR_INFO_BYTES, "tensors")
        raw_infos = []
        for i in range(n_tensors):
            name = cur.string(f"tensor name #{i}", _MAX_TENSOR_NAME_BYTES)
            n_dims = cur.u32(f"tensor {name}")
            if n_dims > _MAX_DIMS:
                raise ModelFileError(f"{self.label} is corrupt: tensor {name} has {n_dims} dimensions")
            dims = [cur.u64(f"tensor {name}") for _ in range(n_dims)]
            ggml_type = cur.u32(f"tensor {name}")
            rel_offset = cur.u64(f"tensor {name}")
            raw_infos.append((name, tuple(reversed(dims)), ggml_type, rel_offset))

        alignment = self.metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
        if (not isinstance(alignment, int) or isinstance(alignment, bool) or not 0 < alignment <= _MAX_ALIGNMENT
                or alignment & (alignment - 1)):
            raise ModelFileError(
                f"{self.label} is corrupt: general.alignment is {_short_repr(alignment)}, not a power "
                f"of two up to {_MAX_ALIGNMENT}"
            )
        data_start = -(-cur.pos // alignment) * alignment

        for name, shape, ggml_type, rel_offset in raw_infos:
            if name in self.tensors:
                raise ModelFileError(f"{self.label} is corrupt: tensor {name} appears twice")
            if rel_offset % alignment:
                raise ModelFileError(
                    f"{self.label} is corrupt: tensor {name} starts at data offset {rel_offset}, "
                    f"which is not a multiple of the file's alignment {alignment}"
                )
            info = TensorInfo(name, shape, ggml_type, data_start + rel_offset,
                              self._byte_size(name, shape, ggml_type))
            end = info.offset + info.n_bytes
            if end > self.file_size:
                raise ModelFileError(
                    f"{self.label} is truncated: tensor {name} needs {info.n_bytes} bytes at offset "
                    f"{info.offset}, but the file ends at byte {self.file_size}"
                )
            self.tensors[name] = info
        self._check_overlaps()

    def _check_overlaps(self) -> None:
        previous: TensorInfo | None = None
        for info in sorted(self.tensors.values(), key=lambda t: (t.offset, t.n_bytes)):
            if info.n_bytes == 0:
                continue
            if previous is not None and info.offset < previous.offset + previous.n_bytes:
                raise ModelFileError(
                    f"{self.label} is corrupt: tensors {previous.name} (bytes {previous.offset} to "
                    f"{previous.offset + previous.n_bytes}) and {info.name} (from byte {info.offset}) overlap"
                )
            previous = info

    def _byte_size(self, name: str, shape: tuple[int, ...], ggml_type: int) -> int:
        try:
            qtype = GGMLQuantizationType(ggml_type)
            block_size, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise UnsupportedQuantization(
                f"unsupported quantization GGML type {ggml_type} in tensor {name} of {self.path}"
            ) from None
        n_elements = math.prod(shape)  # Python ints: a product of uint64 dims cannot wrap
        if n_elements > _MAX_ELEMENTS:
            raise ModelFileError(
                f"{self.label} is corrupt: tensor {name} has shape {list(shape)}, "
                f"{n_elements} values (more than {_MAX_ELEMENTS})"
            )
        if shape and shape[-1] % block_size:
            raise ModelFileError(
                f"{self.label} is corrupt: tensor {name} has rows of {shape[-1]} values, "
                f"not a multiple of the {qtype.name} block size {block_size}"
            )
        return n_elements // block_size * type_size

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as stored, without copying (a view of the mapped file)."""
        info = self.tensors[name]
        return np.frombuffer(self._map, dtype=np.uint8, count=info.n_bytes, offset=info.offset)

    def read(self, name: str) -> np.ndarray:
        """The tensor in numpy order, as float32, or float16 / bfloat16-as-uint16 for those types.

        Half-precision types keep their bits: widening them would double the imported size
        for no gain in accuracy. Callers tell BF16 from a real uint16 by `TensorInfo.ggml_type`.
        """
        info = self.tensors[name]
        data = self.raw(name)
        kind = info.ggml_type
        if kind == GGMLQuantizationType.F32:
            return data.view("<f4").reshape(info.shape)
        if kind == GGMLQuantizationType.F16:
            return data.view("<f2").reshape(info.shape)
        if kind == GGMLQuantizationType.BF16:
            return data.view("<u2").reshape(info.shape)
        if kind == GGMLQuantizationType.F64:
            return data.view("<f8").reshape(info.shape).astype(np.float32)
        qtype = GGMLQuantizationType(kind)
        rows = info.shape[:-1] or (1,)
        blocks = data.reshape(*rows, -1)
        try:
            out = quants.dequantize(blocks, qtype)
        except NotImplementedError:
            raise UnsupportedQuantization(
                f"unsupported quantization {qtype.name} in tensor {name} of {self.path}"
            ) from None
        return np.asarray(out, dtype=np.float32).reshape(info.shape)

    def check_readable(self, name: str) -> None:
        """Raise UnsupportedQuantization now rather than halfway through a long import."""
        kind = self.tensors[name].ggml_type
        if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16,
                    GGMLQuantizationType.F64):
            return
        if not _can_dequantize(GGMLQuantizationType(kind)):
            raise UnsupportedQuantization(
                f"unsupported quantization {GGMLQuantizationType(kind).name} in tensor {name} of {self.path}"
            )


@functools.cache
def _can_dequantize(qtype: GGMLQuantizationType) -> bool:
    _block_size, type_size = GGML_QUANT_SIZES[qtype]
    try:
        quants.dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
