"""The built-in tools: the calculator's safety and limits, date and time, reading attached
files (text, CSV, PDF, size limits), searching the user's history; the registry's checks."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from tests.engine.tools.conftest import FakeSource, by_round, call, collect
from wren.engine.errors import InvalidRequest
from wren.engine.events import ToolResult
from wren.engine.records import SendOptions
from wren.engine.tools.builtin import CALL_CONTEXT, READ_CHARS, CallContext
from wren.engine.tools.calculator import CalcError, evaluate, format_value
from wren.engine.tools.files import MAX_FILE_BYTES, SNIFF_BYTES, ToolFailed, attachment_problem, read_text_file
from wren.engine.tools.registry import ToolRegistry, ToolSpec, validate_arguments


@pytest.mark.parametrize("expression, value", [
    ("2 + 2", 4), ("2 ^ 10", 1024), ("(17.5 * 3) / 4", 13.125), ("7 // 2", 3), ("-7 % 3", 2),
    ("sqrt(16) + abs(-2)", 6.0), ("round(pi, 3)", 3.142), ("factorial(10)", 3628800), ("2 ** -1", 0.5),
    ("max(1, 5, 3)", 5), ("log(8, 2)", 3.0), ("10 × 3 ÷ 4", 7.5), ("2**4000 // 2**3999", 2),
])
def test_calculator_values(expression, value):
    assert evaluate(expression) == pytest.approx(value)


@pytest.mark.parametrize("expression, why", [
    ("__import__('os').system('true')", "unknown function"),
    ("().__class__.__bases__[0].__subclasses__()", "unknown function"),
    ("open('/etc/passwd')", "unknown function"),
    ("x + 1", "unknown name"),
    ("lambda: 1", "not arithmetic"),
    ("[1, 2, 3]", "not arithmetic"),
    ("'a' * 10", "not a number"),
    ("9 ** 9 ** 9", "too large"),
    ("10 ** 100000", "too large"),
    ("2.0 ** 1e9", "too large"),
    ("factorial(100000)", "limited to"),
    ("1 / 0", "division by zero"),
    ("1 << 10000", "not supported"),
    ("exp(1000)", "too large"),
    ("sqrt(-1)", "math error"),
    ("1 +", "not an arithmetic expression"),
    ("", "empty"),
    ("1+" * 300 + "1", "characters long"),
    ("-" * 150 + "1", "parts"),
])
def test_calculator_refuses(expression, why):
    with pytest.raises(CalcError, match=why):
        evaluate(expression)


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_calculator_big_products_are_bounded_and_fast():
    import time

    started = time.perf_counter()
    with pytest.raises(CalcError, match="too large"):
        evaluate("(2**4000) * (2**4000)")
    with pytest.raises(CalcError, match="too large"):
        evaluate("(10**1000)**2")
    assert time.perf_counter() - started < 0.5
    assert format_value(evaluate("0.1 + 0.2")) == repr(0.1 + 0.2)
    assert format_value(evaluate("2.0 * 3")) == "6"
    assert math.isclose(evaluate("sin(pi / 2)"), 1.0)


def test_schema_validation_messages():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items":
              {"type": "string"}}}, "required": ["n"], "additionalProperties": False}
    assert validate_arguments(schema, {"n": 1, "tags": ["a"]}, "t") is None
    assert "'n' is a required property" in validate_arguments(schema, {}, "t")
    assert "tags[1]" in validate_arguments(schema, {"n": 1, "tags": ["a", 2]}, "t")
    assert "must be a JSON object" in validate_arguments(schema, [1], "t")
    assert "more problem" in validate_arguments(schema, {"n": "x", "extra": 1}, "t")


def test_registry_refuses_bad_specs_and_name_clashes():
    reg = ToolRegistry()
    reg.add_source(FakeSource("one", a=None))
    with pytest.raises(InvalidRequest, match="used by one"):
        reg.add_source(FakeSource("two", a=None))

    class Bad(FakeSource):
        def specs(self):
            return [ToolSpec("bad name!", "x")]

    with pytest.raises(InvalidRequest, match="not a usable tool name"):
        reg.add_source(Bad("three"))

    class BadSchema(FakeSource):
        def specs(self):
            return [ToolSpec("b", "x", {"type": "object", "properties": {"n": {"type": 5}}})]

    with pytest.raises(InvalidRequest, match="not valid JSON schema"):
        reg.add_source(BadSchema("four"))
    assert reg.names() == ["a"]
    reg.remove_source("one")
    assert reg.names() == []


def test_read_text_files_csv_and_limits(tmp_path):
    (tmp_path / "notes.md").write_text("# Title\nsome *text* ✓", encoding="utf-8")
    (tmp_path / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    big = tmp_path / "big.txt"
    with open(big, "wb") as out:
        out.truncate(MAX_FILE_BYTES + 1)
    assert read_text_file(tmp_path / "notes.md").endswith("✓")
    assert read_text_file(tmp_path / "data.csv") == "a,b\n1,2\n"
    with pytest.raises(ToolFailed, match="binary file"):
        read_text_file(tmp_path / "blob.bin")
    with pytest.raises(ToolFailed, match="files up to 20 MB"):
        read_text_file(big)
    with pytest.raises(ToolFailed, match="cannot be read"):
        read_text_file(tmp_path / "missing.txt")


def test_a_file_that_will_not_be_read_is_said_as_it_is_attached(tmp_path):
    """attachment_problem reads a file's start only, and says what read_text_file would."""
    tmp_path = tmp_path / "files"
    tmp_path.mkdir()
    (tmp_path / "notes.md").write_text("# Title\nsome *text* ✓", encoding="utf-8")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    (tmp_path / "latin.dat").write_bytes("café".encode("latin-1"))
    (tmp_path / "latin.txt").write_bytes("café".encode("latin-1"))  # a text file's suffix: read as Latin-1
    # a long UTF-8 file whose first SNIFF_BYTES end inside a character is still text
    (tmp_path / "long.dat").write_bytes(b"a" * (SNIFF_BYTES - 1) + "é".encode() * 10)
    (tmp_path / "fake.pdf").write_bytes(b"not a pdf at all")
    _pdf(tmp_path / "paper.pdf", "Wrens are small birds")
    big = tmp_path / "big.txt"
    with open(big, "wb") as out:
        out.truncate(MAX_FILE_BYTES + 1)
    problems = {p.name: attachment_problem(p) for p in sorted(tmp_path.iterdir())}
    assert problems == {
        "big.txt": "big.txt is 20.0 MB; files up to 20 MB can be read",
        "blob.bin": "blob.bin is a binary file, not text; text, Markdown, code, CSV and PDF can be read",
        "fake.pdf": "fake.pdf is not a PDF (it does not start as one)",
        "latin.dat": "latin.dat is not UTF-8 text; text, Markdown, code, CSV and PDF can be read",
        "latin.txt": None, "long.dat": None, "notes.md": None, "paper.pdf": None,
    }
    for name in ("blob.bin", "latin.dat", "big.txt"):  # the same refusal as reading it
        with pytest.raises(ToolFailed) as refused:
            read_text_file(tmp_path / name)
        assert str(refused.value) == problems[name]
    assert attachment_problem(tmp_path / "gone.txt") == "gone.txt cannot be read: No such file or directory"
    assert attachment_problem(tmp_path) == f"{tmp_path.name} is not a file"


def _pdf(path, text):
    """A one-page PDF with `text` on it, written by hand (no PDF writer needed)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))


def test_read_pdf_and_a_broken_one(tmp_path):
    _pdf(tmp_path / "paper.pdf", "Wrens are small birds")
    assert "Wrens are small birds" in read_text_file(tmp_path / "paper.pdf")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    with pytest.raises(ToolFailed, match="not a readable PDF|no text layer"):
        read_text_file(tmp_path / "broken.pdf")


def test_attachments_reach_the_read_tool_through_send(make_engine, tmp_path):
    doc = tmp_path / "report.txt"
    doc.write_text("line\n" * 10_000, encoding="utf-8")
    secret = tmp_path / "other.txt"
    secret.write_text("not attached", encoding="utf-8")

    async def main():
        engine = make_engine(by_round(call("read_attachment", file="report.txt"),
                                      call("read_attachment", file=str(secret)), "done"))
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "summarize", SendOptions(attachments=(str(doc),))))
        shown = await engine.conversations.messages(conv.id)
        missing = await collect(engine.chat.send(conv.id, "again", SendOptions(attachments=(str(tmp_path / "nope.txt"),))))
        await engine.close()
        return events, shown, missing

    events, shown, missing = run(main())
    from wren.engine.events import Failed, FailureKind, Finished, FinishReason

    failed = [e for e in missing if isinstance(e, Failed)]
    assert failed[0].kind is FailureKind.INVALID_REQUEST and "nope.txt does not exist" in failed[0].error
    assert missing[-1] == Finished(FinishReason.ERROR)
    first, second = [e for e in events if isinstance(e, ToolResult)]
    assert not first.is_error and first.content.startswith("line\nline")
    import re

    # the read tool sizes its chunk to the result budget; where the model's tokenizer needs
    # more tokens than that, the budget cuts it: either note says where the text stopped
    shown_chars = len(first.content.split("\n[…")[0])
    note = re.search(r"read again with offset=(\d+)|the first ([\d,]+) are shown", first.content)
    assert (note.group(1) or note.group(2)).replace(",", "") == str(shown_chars)
    assert 100 <= shown_chars <= READ_CHARS
    assert second.is_error and "not an attached file" in second.content and "report.txt" in second.content
    assert shown[0].meta["attachments"] == [str(doc.resolve())]


def test_datetime_and_search_history(make_engine):
    async def main():
        engine = make_engine(by_round(call("current_datetime", timezone="Asia/Tokyo"),
                                      call("current_datetime", timezone="Mars/Olympus"),
                                      call("search_history", query="pelican"), "done"))
        old = await engine.conversations.create("Birds")
        await engine.memories.add("My favourite bird is the pelican")
        store = engine.store
        from wren.engine.records import Role

        await engine.db(store.add_message, old.id, Role.USER, "Tell me about the pelican's pouch", parent_id=None)
        conv = await engine.conversations.create(settings={"tools": ["current_datetime", "search_history"]})
        events = await collect(engine.chat.send(conv.id, "go"))
        await engine.close()
        return old, events

    old, events = run(main())
    tokyo, mars, found = [e for e in events if isinstance(e, ToolResult)]
    assert json.loads(tokyo.content)["utc_offset"] == "+0900"
    assert mars.is_error and "not a known time zone" in mars.content
    data = json.loads(found.content)
    assert any("pelican" in m["text"] for m in data["memories"])
    assert [c["id"] for c in data["conversations"]] == [old.id]
    assert "pouch" in data["conversations"][0]["matches"][0]["text"]


def test_facade_lists_switches_off_and_calls_directly(make_engine):
    async def main():
        engine = make_engine("hi")
        names = [t.name for t in await engine.tools.list()]
        await engine.tools.set_enabled("calculator", False)
        off = {t.name: t.enabled for t in await engine.tools.list()}
        conv = await engine.conversations.create()
        refused = None
        try:
            await collect(engine.chat.send(conv.id, "x", SendOptions(tool_choice="calculator")))
        except InvalidRequest as exc:
            refused = str(exc)
        events = await collect(engine.chat.send(conv.id, "x", SendOptions(tool_choice="calculator")))
        await engine.tools.set_enabled("calculator", True)
        direct = await engine.tools.call("calculator", {"expression": "6*7"})
        bad = await engine.tools.call("calculator", {"expression": 1})
        with pytest.raises(InvalidRequest, match="no tool named"):
            await engine.tools.call("nope", {})
        with pytest.raises(InvalidRequest, match="once, always or deny"):
            engine.tools.approve("call_1_1", "maybe")
        with pytest.raises(InvalidRequest, match="waiting for approval"):
            engine.tools.approve("call_1_1", "once")
        engine.tools.cancel("call_unknown")  # harmless
        await engine.close()
        return names, off, refused, events, direct, bad

    names, off, refused, events, direct, bad = run(main())
    assert names == ["calculator", "current_datetime", "read_attachment", "search_history"]
    assert off["calculator"] is False and off["current_datetime"] is True
    from wren.engine.events import Failed

    failed = [e for e in events if isinstance(e, Failed)]
    assert refused is None and failed and "switched off" in failed[0].error
    assert (direct.content, direct.is_error) == ("42", False)
    assert bad.is_error and "is not of type 'string'" in bad.content


def test_call_context_defaults_to_no_attachments():
    assert CALL_CONTEXT.get() == CallContext()


def run(coro):
    return asyncio.run(coro)


def test_a_file_attached_earlier_stays_readable_in_the_chat(make_engine, tmp_path):
    doc = tmp_path / "notes.md"
    doc.write_text("# Wren notes\nsmall brown bird", encoding="utf-8")

    async def main():
        engine = make_engine(by_round(call("read_attachment", file="notes.md"), "ok"))
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "here is a file", SendOptions(attachments=(str(doc),), tool_choice="none")))
        later = await collect(engine.chat.send(conv.id, "what did it say?", SendOptions(tools=("read_attachment",))))
        settings = (await engine.conversations.get(conv.id)).settings
        await engine.close()
        return later, settings

    later, settings = run(main())
    assert next(e for e in later if isinstance(e, ToolResult)).content.startswith("# Wren notes")
    assert settings["attachments"] == [str(doc.resolve())]


def test_calculator_schema_holds_expressions_and_keeps_call_markup_out():
    """A forced calculator call is constrained by this schema: every expression the tool
    takes fits it, and a string that runs on into the call's closing markup does not."""
    from wren.engine.inference.constrain import Constraint
    from wren.engine.tools.builtin import CALCULATOR

    for expression in ("2 + 2", "(17.5 * 3) / 4", "2 ^ 10", "-7 % 3", "round(pi, 3)", "log(8, 2)",
                       "10 × 3 ÷ 4", "7 // 2", "1e3 − 1", "factorial(10)"):
        assert validate_arguments(CALCULATOR.parameters, {"expression": expression}, "calculator") is None
        evaluate(expression)
    why = validate_arguments(CALCULATOR.parameters, {"expression": "17*23}}</tool_call>  # This is"}, "calculator")
    assert why and "expression" in why
    assert Constraint.tool_call("calculator", CALCULATOR.parameters).tool_names == ("calculator",)


def test_a_syntax_error_does_not_repeat_the_expression():
    with pytest.raises(CalcError) as caught:
        evaluate("17*23}")
    assert "17*23" not in str(caught.value) and "not an arithmetic expression" in str(caught.value)
