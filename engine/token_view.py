"""Tokens you can see: a text cut into the model's tokens, with ids and where each one sits.

`engine.models.tokens(text)` (engine/models.py) loads only the tokenizer of the loaded model,
else of `model`, else of the default one (well under a second), never the model itself.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .errors import InvalidRequest
from .records import check_unicode

if TYPE_CHECKING:
    from .tokenize import Tokenizer

MAX_TOKEN_CHARS = 200_000  # a token view of more is not something anyone reads
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@dataclass(frozen=True)
class TokenPiece:
    """One token: its id, its own text, and its span [start, end) in the input's characters.

    `text` is what the token stands for. A token holding only part of a character's UTF-8
    bytes (a byte-fallback piece, or one byte of a byte-level BPE) shows those bytes as
    "<0xE2>"; its span is the whole character, shared with the other pieces of it.
    """

    id: int
    text: str
    start: int
    end: int

    @property
    def is_bytes(self) -> bool:
        return bool(self.text) and _BYTE_TOKEN.sub("", self.text) == ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def visible(text: str) -> str:
    """Whitespace made visible: a space is ·, a tab →, a newline ↵."""
    return text.replace(" ", "·").replace("\t", "→").replace("\r", "␍").replace("\n", "↵")


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Byte-level BPE's printable stand-ins for the 256 byte values, reversed."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def _piece_text(raw: Any, token_id: int) -> str:
    """The text one token stands for (bytes of a partial character as <0x..>)."""
    token = raw.id_to_token(token_id)
    if token is None:
        return ""
    if _BYTE_TOKEN.fullmatch(token):
        value = bytes([int(token[3:5], 16)])
        return value.decode("utf-8") if value[0] < 0x80 else token
    decoded = raw.decode([token_id], skip_special_tokens=False)
    if "\ufffd" not in decoded:
        return decoded
    table = _byte_decoder()
    if all(c in table for c in token):  # byte-level BPE: a token's characters are its bytes
        data = bytes(table[c] for c in token)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "".join(f"<0x{b:02X}>" for b in data)
    return decoded


def pieces(tokenizer: Tokenizer, text: str) -> list[TokenPiece]:
    """`text` as the tokenizer cuts it, special-token markup read as plain text, no BOS."""
    check_unicode(text, "the text")
    if not isinstance(text, str):
        raise InvalidRequest("the text to show as tokens must be a string")
    if len(text) > MAX_TOKEN_CHARS:
        raise InvalidRequest(f"the text is {len(text):,} characters long; a token view shows at most "
                             f"{MAX_TOKEN_CHARS:,}")
    if not text:
        return []
    raw = tokenizer._text  # the tokenizer that reads typed markup as text (engine/tokenize.py)
    encoding = raw.encode(text, add_special_tokens=False)
    out = []
    for token_id, (start, end) in zip(encoding.ids, encoding.offsets):
        out.append(TokenPiece(token_id, _piece_text(raw, token_id), start, end))
    return out

