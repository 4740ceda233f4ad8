"""What a reader makes of a library file: blocks of text with their place in it, or the
reason it was skipped (engine/library/formats.py, html_text.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


class Skipped(Exception):
    """The file is not indexed; the message says why (shown in `wren docs status`)."""


@dataclass(frozen=True)
class Block:
    """A paragraph, a heading's section, a page or a row, with where it is in its file.

    location: any of "page", "heading" (the path of headings above it), "lines" (first and
    last line, 1-based), "rows" (first and last data row), "chapter"."""

    text: str
    location: dict = field(default_factory=dict)
