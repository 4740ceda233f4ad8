"""ContextAssembler with attached files, on a word-count tokenizer: a file that fits goes in
whole with the question, one that does not as an excerpt, and when the exact count of the
prompt runs over the estimate the files are cut after older turns are dropped, never past the
budget."""

from __future__ import annotations

import asyncio

from wren.engine.context import ContextAssembler, ContextRequest, PartKind, PartState
from wren.engine.context.attachments import AttachedFile, needs_reader


def words(text: str) -> int:
    return max(1, len(text.split()))


def _file(name: str, n_words: int, message_id: int | None = 9) -> AttachedFile:
    text = " ".join(f"w{i}" for i in range(n_words))
    return AttachedFile(name, text, len(text), "", message_id)


def _assemble(assembler, files, window=2048, history=()):
    return asyncio.run(assembler.assemble(ContextRequest(
        window=window, new_message="what does it say?", history=list(history), new_message_id=9,
        attachments=tuple(files))))


def test_a_small_file_goes_in_whole_before_the_question():
    out = _assemble(ContextAssembler(words), [_file("a.md", 50)])
    last = out.messages[-1]["content"]
    assert last.startswith("The user attached a file to this message.\n\n[file: a.md]\nw0 w1")
    assert last.endswith("[end of a.md]\n\nwhat does it say?")
    (part,) = out.report.parts_of(PartKind.ATTACHMENT)
    assert (part.state, part.text, part.source_ids) == (PartState.INCLUDED, "a.md", (9,))
    assert not needs_reader(out.report)


def test_a_big_file_is_an_excerpt_within_half_the_room_and_a_second_is_left_out():
    out = _assemble(ContextAssembler(words), [_file("big.md", 5000), _file("next.md", 4000, None)])
    big, second = out.report.parts_of(PartKind.ATTACHMENT)
    assert big.state is PartState.INCLUDED and big.note.startswith("an excerpt: the first ")
    assert second.state is PartState.DROPPED and "too long" in second.note
    budget = out.report.budget
    assert big.tokens <= budget // 2 and out.report.prompt_tokens <= budget
    assert "[file: next.md — too long for this model's window" in out.messages[-1]["content"]
    assert needs_reader(out.report)


def test_an_exact_count_over_the_estimate_cuts_the_files_to_fit():
    # `count` underestimates by 3x; the exact chat counter catches it after the turns are gone.
    exact = lambda messages: sum(3 * words(m["content"]) + 4 for m in messages)  # noqa: E731
    assembler = ContextAssembler(lambda t: max(1, words(t) // 3), count_chat=exact)
    history = [{"id": i, "role": "user" if i % 2 else "assistant", "content": "older turn text " * 5}
               for i in range(1, 9)]
    out = _assemble(assembler, [_file("a.md", 900)], window=1024, history=history)
    assert out.report.prompt_tokens == exact(out.messages) <= out.report.budget
    (part,) = out.report.parts_of(PartKind.ATTACHMENT)
    assert part.state is PartState.INCLUDED and part.note.startswith("an excerpt")
    assert "[file: a.md]" in out.messages[-1]["content"]


def test_an_unreadable_file_is_named_with_its_reason():
    out = _assemble(ContextAssembler(words), [AttachedFile("x.bin", None, 0, "x.bin is a binary file, not text")])
    (part,) = out.report.parts_of(PartKind.ATTACHMENT)
    assert part.state is PartState.DROPPED and "binary" in part.note
    assert "[file: x.bin — it could not be read: x.bin is a binary file, not text]" in out.messages[-1]["content"]
