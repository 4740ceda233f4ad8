"""How long a GGUF's header is, from the file's first bytes: a pull reads that much with a
Range request and checks it before fetching the rest (pull.py)."""

from __future__ import annotations

import struct

# metadata value types: the fixed sizes of the scalars, then a string and an array
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class _Short(Exception):
    """The header goes on past the bytes at hand."""


class _Walk:
    """A position in `prefix`, the first bytes of a file of `file_size` bytes."""

    def __init__(self, prefix: bytes, file_size: int):
        self.prefix = prefix
        self.file_size = file_size
        self.pos = 8  # past the magic and the version

    def take(self, n: int) -> int:
        """Steps over `n` bytes; where they start."""
        if n < 0 or self.pos + n > self.file_size:
            raise ValueError("past the end of the file")
        if self.pos + n > len(self.prefix):
            raise _Short
        start, self.pos = self.pos, self.pos + n
        return start

    def u32(self) -> int:
        return struct.unpack_from("<I", self.prefix, self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack_from("<Q", self.prefix, self.take(8))[0]

    def skip_value(self, vtype: int) -> None:
        if vtype in _SCALAR_SIZES:
            self.take(_SCALAR_SIZES[vtype])
        elif vtype == _STRING:
            self.take(self.u64())
        elif vtype == _ARRAY:
            item, count = self.u32(), self.u64()
            if item in _SCALAR_SIZES:
                self.take(count * _SCALAR_SIZES[item])
            else:
                for _ in range(count):
                    self.skip_value(item)
        else:
            raise ValueError(f"unknown metadata type {vtype}")

    def header(self) -> None:
        """Over the counts, the metadata and the tensor table."""
        n_tensors, n_kv = self.u64(), self.u64()
        for _ in range(n_kv):
            self.take(self.u64())  # the key
            self.skip_value(self.u32())
        for _ in range(n_tensors):
            self.take(self.u64())  # the name
            n_dims = self.u32()
            if n_dims > 4:
                raise ValueError("too many dimensions")
            self.take(8 * n_dims + 4 + 8)  # dims, type, offset


# The first read (or Range request) of a GGUF's start when its header is wanted, doubled
# until the header is in (a 150k-token vocabulary takes about 6 MB).
HEADER_PROBE_BYTES = 4 << 20


def gguf_header_length(prefix: bytes, file_size: int) -> int | None:
    """How many bytes a GGUF's metadata and tensor table take, from the file's first bytes;
    None if `prefix` stops inside them. Bytes that are not a sane GGUF header give
    len(prefix): the import's own check then says what is wrong with them."""
    corrupt = len(prefix)
    if len(prefix) < 24:
        return None if len(prefix) < file_size and b"GGUF".startswith(prefix[:4]) else corrupt
    if prefix[:4] != b"GGUF":
        return corrupt
    walk = _Walk(prefix, file_size)
    try:
        walk.header()
    except _Short:
        return None
    except ValueError:
        return corrupt
    return walk.pos
