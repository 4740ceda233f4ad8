"""Write a .safetensors file one tensor at a time, and read a file's header without its data.

The `safetensors` package wants every tensor in memory at once; a 7B model dequantized to
float32 does not fit, so the (simple, documented) format is written here as a stream.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import ModelFileError

DTYPE_SIZES = {"F32": 4, "F16": 2, "BF16": 2}
_HEADER_ALIGNMENT = 8  # the reference implementation pads the header to 8 bytes


class SafetensorsWriter:
    """Declare every tensor up front (the header comes first), then `write` them in that order."""

    def __init__(self, path: Path, specs: list[tuple[str, str, tuple[int, ...]]]) -> None:
        self._order = [name for name, _, _ in specs]
        self._sizes: dict[str, int] = {}
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, dtype, shape in specs:
            size = DTYPE_SIZES[dtype] * int(np.prod(shape, dtype=np.int64))
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
            self._sizes[name] = size
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % _HEADER_ALIGNMENT)
        self._fh: BinaryIO = open(path, "wb")
        self._fh.write(struct.pack("<Q", len(raw)))
        self._fh.write(raw)
        self._next = 0

    def write(self, name: str, array: np.ndarray) -> None:
        expected = self._order[self._next]
        if name != expected:
            raise ValueError(f"tensor {name} written out of order; {expected} comes next")
        data = np.ascontiguousarray(array)
        if data.nbytes != self._sizes[name]:
            raise ValueError(f"tensor {name} has {data.nbytes} bytes, header says {self._sizes[name]}")
        if data.dtype.byteorder == ">":
            data = data.byteswap().view(data.dtype.newbyteorder("<"))
        self._fh.write(data.reshape(-1).view(np.uint8).data)
        self._next += 1

    def close(self) -> None:
        self._fh.close()
        if self._next != len(self._order):
            raise ValueError(f"only {self._next} of {len(self._order)} tensors were written")

    def __enter__(self) -> SafetensorsWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._fh.close()


def read_header(path: Path) -> dict[str, dict]:
    """Tensor name -> {"dtype", "shape", "data_offsets"}; raises ModelFileError if unreadable."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ModelFileError(f"{path} is not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if length > size - 8 or length > 100_000_000:
                raise ModelFileError(f"{path} is not a safetensors file or is truncated (header of {length} bytes)")
            header = json.loads(fh.read(length))
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{path} has a corrupt safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise ModelFileError(f"{path} has a corrupt safetensors header")
    header.pop("__metadata__", None)
    data_size = size - 8 - length
    for name, entry in header.items():
        end = entry.get("data_offsets", [0, 0])[1] if isinstance(entry, dict) else None
        if not isinstance(end, int):
            raise ModelFileError(f"{path} has a corrupt safetensors header entry for {name}")
        if end > data_size:
            raise ModelFileError(
                f"{path} is truncated: tensor {name} ends at byte {end} of the data, "
                f"but the file holds only {data_size} bytes of data"
            )
    return header
