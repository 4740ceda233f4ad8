"""engine/inference/reasoning.py: the stream step that splits thinking from the answer, fed
every way a stream can cut the text (one character at a time, and at every single cut)."""

from __future__ import annotations

import pytest

from wren.engine.inference.families.family import ReasoningFormat
from wren.engine.inference.reasoning import (
    HarmonySplitter,
    Piece,
    ThinkSplitter,
    opens_thinking,
    reasoning_format,
    splitter_for,
)


def merged(pieces: list[Piece]) -> list[tuple[str, str, str]]:
    out: list[list[str]] = []
    for p in pieces:
        if out and out[-1][0] == p.kind and p.kind != "call":
            out[-1][1] += p.text
        else:
            out.append([p.kind, p.text, p.recipient])
    return [tuple(x) for x in out]  # type: ignore[misc]


def every_cut(make, text: str) -> list:
    """The split of `text` fed whole, a character at a time, and cut once at each place:
    all the same (returned once)."""
    results = []
    feeds = [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]
    for parts in feeds:
        split = make()
        pieces = [p for part in parts for p in split.feed(part)] + split.finish()
        results.append((merged(pieces), split.unclosed))
    assert all(r == results[0] for r in results), "a cut between deltas changed the split"
    return results[0]


def test_think_tags_split_at_any_cut():
    text = "<think>\nThe user asks 2+2.\n</think>\n\nIt is 4."
    pieces, unclosed = every_cut(ThinkSplitter, text)
    assert pieces == [("thinking", "The user asks 2+2.\n", ""), ("answer", "It is 4.", "")]
    assert not unclosed


def test_leading_blank_text_before_think_is_dropped():
    pieces, _ = every_cut(ThinkSplitter, "\n  <think>x</think>y")
    assert pieces == [("thinking", "x", ""), ("answer", "y", "")]


def test_a_prompt_that_opened_think_starts_inside_it():
    pieces, _ = every_cut(lambda: ThinkSplitter(thinking=True), "hmm, so 4.\n</think>\n\n4")
    assert pieces == [("thinking", "hmm, so 4.\n", ""), ("answer", "4", "")]


@pytest.mark.parametrize("text", ["Use <think> tags like this.", "<thin", "<", "Answer </think> late"])
def test_tags_that_do_not_open_the_answer_are_its_text(text):
    pieces, unclosed = every_cut(ThinkSplitter, text)
    assert pieces == [("answer", text, "")] and not unclosed


def test_thinking_never_closed_is_thinking_and_unclosed():
    pieces, unclosed = every_cut(ThinkSplitter, "<think>\nstill going </thi")
    assert pieces == [("thinking", "still going </thi", "")] and unclosed


def test_harmony_analysis_then_final_at_any_cut():
    text = ("<|channel|>analysis<|message|>User says hi.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>")
    pieces, unclosed = every_cut(HarmonySplitter, text)
    assert pieces == [("thinking", "User says hi.", ""), ("answer", "Hello!", "")] and not unclosed


def test_harmony_call_addressed_in_the_role_or_the_channel():
    in_role = ("<|channel|>analysis<|message|>Need weather.<|end|>"
               '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>')
    pieces, _ = every_cut(HarmonySplitter, in_role)
    assert pieces == [("thinking", "Need weather.", ""), ("call", '{"city": "Oslo"}', "get_weather")]
    in_channel = '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1}<|call|>'
    assert every_cut(HarmonySplitter, in_channel)[0] == [("call", '{"a": 1}', "add")]
    # the prompt ends at "<|start|>assistant": the model's text may start with its recipient
    bare = ' to=functions.add<|channel|>commentary json<|message|>{"a": 2}<|call|>'
    assert every_cut(HarmonySplitter, bare)[0] == [("call", '{"a": 2}', "add")]


def test_harmony_commentary_without_recipient_is_answer_text_and_plain_text_is_the_answer():
    text = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Done."
    assert every_cut(HarmonySplitter, text)[0] == [("answer", "Checking.Done.", "")]
    assert every_cut(HarmonySplitter, "Just text.")[0] == [("answer", "Just text.", "")]


def test_harmony_analysis_never_ended_is_unclosed():
    pieces, unclosed = every_cut(HarmonySplitter, "<|channel|>analysis<|message|>Thinking on and on")
    assert pieces == [("thinking", "Thinking on and on", "")] and unclosed


def test_which_format_and_which_step():
    assert reasoning_format(ReasoningFormat.HARMONY, "<think>") is ReasoningFormat.HARMONY  # declared wins
    assert reasoning_format(None, "{{ '<think>' }}") is ReasoningFormat.THINK_TAGS
    assert reasoning_format(None, "<|start|>{{ m }}<|channel|>") is ReasoningFormat.HARMONY
    assert reasoning_format(None, "<|im_start|>") is None and reasoning_format(None, None) is None
    assert opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n") and not opens_thinking("")
    assert splitter_for(None) is None
    assert isinstance(splitter_for(ReasoningFormat.HARMONY), HarmonySplitter)
    assert splitter_for(ReasoningFormat.THINK_TAGS, "x<think>\n").unclosed  # starts inside


def test_text_that_only_looks_like_a_harmony_header_is_shown():
    text = "to=" + "x" * 600 + " and on"
    split = HarmonySplitter()
    pieces = split.feed(text) + split.finish()
    assert merged(pieces) == [("answer", text, "")]
    assert every_cut(HarmonySplitter, "today is fine")[0] == [("answer", "today is fine", "")]
