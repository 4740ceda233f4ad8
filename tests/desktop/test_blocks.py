"""The streaming Markdown splitter: same blocks however the text is chunked."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wren.desktop.chat.blocks import (
    AppendCode,
    AppendProse,
    BlockSplitter,
    CloseCode,
    OpenCode,
    RenderProse,
    split_blocks,
)

SAMPLE = """Intro with **bold** and `code`.

```python
def f(x):
    return x  # ``` not a fence
```
Between.

   ~~~
   indented tilde fence
     keeps relative indent
   ~~~

- one
- two

```
unterminated"""


def stream(text: str, cuts: list[int]):
    splitter = BlockSplitter()
    ops = []
    last = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(text))):
        ops += splitter.feed(text[last:cut])
        last = cut
    ops += splitter.feed(text[last:])
    return ops + splitter.finish()


def finished(ops):
    return [op for op in ops if not isinstance(op, (AppendProse, AppendCode)) and getattr(op, "final", True)]


def test_blocks_of_a_sample():
    ops = split_blocks(SAMPLE)
    assert ops == [
        RenderProse("Intro with **bold** and `code`.", final=True),
        OpenCode("python"),
        CloseCode("def f(x):\n    return x  # ``` not a fence", "python"),
        RenderProse("Between.", final=True),
        OpenCode(""),
        CloseCode("indented tilde fence\n  keeps relative indent", ""),
        RenderProse("- one\n- two", final=True),
        OpenCode(""),
        CloseCode("unterminated", ""),
    ]


def test_fence_markers_never_reach_the_screen():
    ops = stream(SAMPLE, list(range(len(SAMPLE))))  # one character at a time
    shown = "".join(op.text for op in ops if isinstance(op, (AppendProse, AppendCode)))
    assert "```" not in shown.replace("# ``` not a fence", "")
    assert "~~~" not in shown


def test_every_character_shows_while_streaming():
    text = "Hello there, this is a line\nand another line\n\nNew paragraph"
    ops = stream(text, list(range(len(text))))
    shown = "".join(op.text for op in ops if isinstance(op, AppendProse))
    assert shown.replace("\n", "") == text.replace("\n", "")


def test_complete_lines_render_before_the_paragraph_ends():
    ops = stream("1. first\n2. sec", [5, 12])
    renders = [op for op in ops if isinstance(op, RenderProse)]
    assert renders[0] == RenderProse("1. first", final=False)
    assert renders[-1] == RenderProse("1. first\n2. sec", final=True)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab `~\n#-*1. py")), max_size=120),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=30),
)
def test_chunking_never_changes_the_finished_blocks(text, cuts):
    assert finished(stream(text, cuts)) == split_blocks(text)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=20))
def test_code_text_survives_any_chunking(text, cuts):
    source = f"```\n{text.replace('`', '')}\n```\n"
    code = [op.code for op in finished(stream(source, cuts)) if isinstance(op, CloseCode)]
    assert code == [text.replace("`", "")]
