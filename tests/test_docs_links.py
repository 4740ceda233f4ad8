"""Every relative link in the README, CONTRIBUTING.md, CHANGELOG.md and docs/*.md points into the repository.

A link to a file must name one that exists (a clone has nothing outside the repository, so
`../shared/...` is dead); a link with an anchor must name a heading of its Markdown target.
Links in code (fenced blocks, `inline`) are not links and are skipped, as are URLs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
FENCE = re.compile(r"^\s{0,3}(```|~~~).*?^\s{0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose(text: str) -> str:
    """The text without code: fenced blocks and inline code spans blanked."""
    text = FENCE.sub("", text)
    return CODE_SPAN.sub("", text)


def links(text: str) -> list[str]:
    prose = _prose(text)
    return [m.group(1) for m in INLINE.finditer(prose)] + [m.group(1) for m in REFERENCE.finditer(prose)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def _prose_lines(text: str) -> list[str]:
    return FENCE.sub("", text).splitlines()


def problems(doc: Path) -> list[str]:
    """What is wrong with `doc`'s relative links, one sentence each."""
    out = []
    for target in links(doc.read_text(encoding="utf-8")):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # a URL, not a file of this repository
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part.split("?", 1)[0])
        where = f"{doc.relative_to(ROOT)}: link {target!r}"
        if "shared/" in path_part.replace("\\", "/") and path_part.startswith(".."):
            out.append(f"{where} points outside the repository (../shared is not in a clone)")
            continue
        resolved = (doc.parent / path_part).resolve() if path_part else doc
        try:
            resolved.relative_to(ROOT)
        except ValueError:
            out.append(f"{where} points outside the repository ({resolved})")
            continue
        if not resolved.exists():
            out.append(f"{where}: {resolved.relative_to(ROOT)} does not exist")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            out.append(f"{where}: {resolved.relative_to(ROOT)} has no heading with the anchor #{anchor}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    assert doc.is_file()
    assert not problems(doc), "\n".join(problems(doc))


def test_readme_links_the_design_contributing_and_changelog() -> None:
    targets = {t.partition("#")[0] for t in links((ROOT / "README.md").read_text(encoding="utf-8"))}
    assert {"docs/architecture.md", "CONTRIBUTING.md", "CHANGELOG.md"} <= targets
    assert not any("../shared" in t for t in targets)


def test_the_checker_catches_dead_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself: dead files, ../shared, a missing anchor; URLs and code are not links."""
    tmp_path = tmp_path.resolve()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A title\n\n## Wren's kernels\n", encoding="utf-8")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](docs/a.md) [anchor](docs/a.md#wrens-kernels) [self](#top-part)\n"
        "[dead](docs/missing.md) [shared](../shared/DESIGN.md) [bad anchor](docs/a.md#nope)\n"
        "[web](https://example.org/x.md) `[code](nowhere.md)`\n"
        "```\n[fenced](nowhere-either.md)\n```\n"
        "# Top part\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = problems(doc)
    assert len(found) == 3, found
    assert any("docs/missing.md does not exist" in p for p in found)
    assert any("../shared" in p for p in found)
    assert any("#nope" in p for p in found)
