"""`wren docs …`, `wren projects …` and `wren ask`'s library options, run in-process on a
WREN_HOME per test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.terminal.ask_request import AskRequest
from wren.engine.terminal.main import build_parser, main


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_add_list_search_status_rm(capsys, tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "otters.md").write_text("# Otters\n\nSea otters hold hands while they sleep.\n")
    (folder / "blob.dat").write_bytes(b"\0\1\2" * 50)
    assert main(["docs", "add", str(folder), "--watch", "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["added"][0]["watch"] is True and added["counts"]["indexed"] == 1

    assert main(["docs", "list", "--json"]) == 0
    (source,) = lines(capsys.readouterr().out)
    assert source["path"] == str(folder.resolve()) and source["files"]["skipped"] == 1

    assert main(["docs", "search", "otters sleeping", "--json", "--limit", "3"]) == 0
    (hit,) = lines(capsys.readouterr().out)
    assert set(hit) == {"path", "location", "text", "score"}
    assert hit["path"].endswith("otters.md") and hit["location"]["heading"] == ["Otters"]

    assert main(["docs", "status"]) == 0
    out = capsys.readouterr().out
    assert "1 file(s) indexed, 1 skipped" in out and "blob.dat: a binary file" in out

    assert main(["docs", "rm", str(source["id"])]) == 0
    assert "removed" in capsys.readouterr().out
    assert main(["docs", "search", "otters", "--json"]) == 0
    assert capsys.readouterr().out == ""


def test_bad_input_is_a_clear_error(capsys, tmp_path: Path):
    assert main(["docs", "add", str(tmp_path / "nope")]) == 2
    assert "no such file or folder; nothing was added" in capsys.readouterr().err
    assert main(["docs", "rm", str(tmp_path)]) == 2
    assert "not in the library" in capsys.readouterr().err
    assert main(["docs", "search", "  "]) == 2
    assert "the search is empty" in capsys.readouterr().err
    assert main(["projects", "add-docs", "missing", str(tmp_path)]) == 2
    assert "no project named 'missing'" in capsys.readouterr().err


def test_projects(capsys, tmp_path: Path):
    (tmp_path / "a.txt").write_text("Alpha.\n")
    assert main(["projects", "create", "garden", "--instructions", "Be brief."]) == 0
    assert main(["projects", "create", "garden"]) == 2
    assert "exists already" in capsys.readouterr().err
    assert main(["projects", "add-docs", "garden", str(tmp_path / "a.txt")]) == 0  # added to the library too
    assert main(["projects", "instructions", "garden", "Be very brief."]) == 0
    capsys.readouterr()
    assert main(["projects", "list", "--json"]) == 0
    (project,) = lines(capsys.readouterr().out)
    assert project["name"] == "garden" and project["instructions"] == "Be very brief."
    assert len(project["source_ids"]) == 1
    assert main(["projects", "rm", "garden"]) == 0
    capsys.readouterr()
    assert main(["projects", "list", "--json"]) == 0 and capsys.readouterr().out == ""
    assert main(["docs", "list", "--json"]) == 0 and len(lines(capsys.readouterr().out)) == 1  # files stay


def test_ask_takes_the_library_options():
    args = build_parser().parse_args(["ask", "--no-docs", "--project", "garden", "hi"])
    assert (args.docs, args.project) == (False, "garden")
    assert build_parser().parse_args(["ask", "--docs", "hi"]).docs is True
    assert build_parser().parse_args(["ask", "hi"]).docs is None
    request = AskRequest(text="hi", documents=False, project="garden")
    assert AskRequest.from_wire(json.loads(json.dumps(request.to_wire()))) == request
    with pytest.raises(InvalidRequest, match="'documents' must be true, false or null"):
        AskRequest.from_wire({"text": "hi", "documents": "yes"})
