"""Pygments highlighting of finished code blocks as inline-styled HTML a QTextDocument reads."""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.token import Text
from pygments.util import ClassNotFound

LIGHT_STYLE = "default"
DARK_STYLE = "monokai"


@functools.lru_cache(maxsize=64)
def _lexer(language: str):
    try:
        return get_lexer_by_name(language.lower(), stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


@functools.lru_cache(maxsize=2)
def _formatter(dark: bool) -> HtmlFormatter:
    # noclasses: QTextDocument understands inline styles, not a style sheet of classes.
    return HtmlFormatter(style=DARK_STYLE if dark else LIGHT_STYLE, noclasses=True, nowrap=True)


def code_html(code: str, language: str, *, dark: bool) -> str:
    """The code as a <pre> of coloured spans; plain escaped text when the language is unknown."""
    lexer = _lexer(language) if language else None
    if lexer is None:
        body = html.escape(code)
    else:
        body = highlight(code, lexer, _formatter(dark)).removesuffix("\n")
    return f"<pre style=\"margin:0\">{body}</pre>"



@dataclass(frozen=True)
class CodeColors:
    background: str
    text: str


def code_colors(dark: bool) -> CodeColors:
    """The highlighting style's own colours, so the block's frame matches its spans."""
    style = _formatter(dark).style
    text = style.style_for_token(Text).get("color")
    return CodeColors(style.background_color, f"#{text}" if text else ("#f8f8f2" if dark else "#1f2328"))


# Loading a lexer imports its module (python: ~50 ms); done while idle, not mid-answer.
COMMON_LANGUAGES = ("python", "bash", "javascript", "typescript", "json", "c", "cpp", "rust", "go", "java", "sql", "html", "css", "yaml")


def warm(language: str, dark: bool) -> None:
    code_html("x", language, dark=dark)
