"""Read a GGUF file's metadata and tensors, with errors that name the file and the fault.

The `gguf` package's reader fails on damaged files with bare ValueErrors, so the container
is parsed here and only dequantization is left to `gguf.quants`.
"""

from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from engine.errors import ModelFileError, UnsupportedQuantization

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
# ggml tensors have at most 4 dimensions; more means the header is garbage.
_MAX_DIMS = 4

# GGUF metadata value types -> struct format (strings and arrays handled separately).
_SCALARS: dict[int, str] = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}
_STRING, _ARRAY = 8, 9
_NUMPY_OF_SCALAR: dict[int, str] = {
    0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8",
    11: "<i8", 12: "<f8",
}


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
        return int(np.prod(self.shape, dtype=np.int64))


class _Cursor:
    """Sequential reads over the mapped header that turn running off the end into a clear error."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise ModelFileError(
                f"{self.path} is truncated: its header needs {n} more bytes for {what} at byte "
                f"{self.pos}, but the file ends at byte {len(self.buf)}"
            )

    def scalar(self, fmt: str, what: str) -> Any:
        size = struct.calcsize("<" + fmt)
        self._need(size, what)
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str) -> str:
        length = self.scalar("Q", what)
        self._need(length, what)
        raw = self.buf[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, what: str) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            item_type = self.scalar("I", what)
            count = self.scalar("Q", what)
            if item_type in _NUMPY_OF_SCALAR:
                # token types and scores are long numeric arrays: read them in one go
                dtype = np.dtype(_NUMPY_OF_SCALAR[item_type])
                self._need(count * dtype.itemsize, what)
                arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
                self.pos += count * dtype.itemsize
                return arr.tolist()
            # every element takes at least 8 bytes (a string length), so a huge count in a
            # damaged file is caught before looping over it
            self._need(count * 8 if item_type == _STRING else 0, what)
            return [self.value(item_type, what) for _ in range(count)]
        raise ModelFileError(f"{self.path} is corrupt: unknown metadata type {vtype} in {what}")


class GGUFFile:
    """An opened GGUF file: `metadata` (key -> value) and `tensors` (name -> TensorInfo).

    Opening checks the whole layout, so a truncated download fails here, before any work.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise ModelFileError(f"{self.path} does not exist")
        if not self.path.is_file():
            raise ModelFileError(f"{self.path} is not a file")
        try:
            with open(self.path, "rb") as fh:
                size = self.path.stat().st_size
                if size < 4:
                    raise ModelFileError(f"{self.path} is not a GGUF file (it is {size} bytes long)")
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise ModelFileError(f"{self.path} cannot be read: {exc.strerror or exc}") from exc
        self.file_size = len(self._map)
        self.metadata: dict[str, Any] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._parse()

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
        cur = _Cursor(self._map, self.path)
        magic = bytes(self._map[:4])
        if magic != _MAGIC:
            raise ModelFileError(f"{self.path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
        cur.pos = 4
        version = cur.scalar("I", "the version")
        if version & 0xFFFF == 0 and version != 0:
            raise ModelFileError(f"{self.path} is a big-endian GGUF file, which Wren cannot read")
        if version not in (2, 3):
            raise ModelFileError(f"{self.path} has GGUF version {version}; Wren reads versions 2 and 3")
        n_tensors = cur.scalar("Q", "the tensor count")
        n_kv = cur.scalar("Q", "the metadata count")
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            vtype = cur.scalar("I", f"the type of {key}")
            self.metadata[key] = cur.value(vtype, key)

        raw_infos = []
        for i in range(n_tensors):
            name = cur.string(f"tensor name #{i}")
            n_dims = cur.scalar("I", f"tensor {name}")
            if n_dims > _MAX_DIMS:
                raise ModelFileError(f"{self.path} is corrupt: tensor {name} has {n_dims} dimensions")
            dims = [cur.scalar("Q", f"tensor {name}") for _ in range(n_dims)]
            ggml_type = cur.scalar("I", f"tensor {name}")
            rel_offset = cur.scalar("Q", f"tensor {name}")
            raw_infos.append((name, tuple(reversed(dims)), ggml_type, rel_offset))

        alignment = self.metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise ModelFileError(f"{self.path} is corrupt: general.alignment is {alignment!r}")
        data_start = -(-cur.pos // alignment) * alignment

        for name, shape, ggml_type, rel_offset in raw_infos:
            if name in self.tensors:
                raise ModelFileError(f"{self.path} is corrupt: tensor {name} appears twice")
            info = TensorInfo(name, shape, ggml_type, data_start + rel_offset,
                              self._byte_size(name, shape, ggml_type))
            end = info.offset + info.n_bytes
            if end > self.file_size:
                raise ModelFileError(
                    f"{self.path} is truncated: tensor {name} needs {info.n_bytes} bytes at offset "
                    f"{info.offset}, but the file ends at byte {self.file_size}"
                )
            self.tensors[name] = info

    def _byte_size(self, name: str, shape: tuple[int, ...], ggml_type: int) -> int:
        try:
            qtype = GGMLQuantizationType(ggml_type)
            block_size, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise UnsupportedQuantization(
                f"unsupported quantization GGML type {ggml_type} in tensor {name} of {self.path}"
            ) from None
        n_elements = int(np.prod(shape, dtype=np.int64))
        if shape and shape[-1] % block_size:
            raise ModelFileError(
                f"{self.path} is corrupt: tensor {name} has rows of {shape[-1]} values, "
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


@functools.lru_cache(maxsize=None)
def _can_dequantize(qtype: GGMLQuantizationType) -> bool:
    _block_size, type_size = GGML_QUANT_SIZES[qtype]
    try:
        quants.dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True
