"""A library file → its text as blocks that keep their place (page, heading path, lines,
rows), by format: Markdown, plain text, code, HTML (the main text), CSV, PDF, DOCX, EPUB.
A file Wren cannot read raises `Skipped` with the reason the user sees."""

from __future__ import annotations

import csv
import io
import re
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from xml.etree import ElementTree

from .blocks import Block, Skipped
from .html_text import html_blocks

__all__ = ["Block", "Skipped", "extract", "format_of"]


MARKDOWN = {".md", ".markdown", ".mdown", ".mkd", ".rst"}
PLAIN = {".txt", ".text", ".log", ".org", ".tex", ""}
CODE = {".py", ".pyi", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".c", ".h", ".cc", ".cpp", ".hpp",
        ".java", ".kt", ".swift", ".rb", ".php", ".cs", ".sh", ".bash", ".zsh", ".sql", ".toml", ".yaml",
        ".yml", ".json", ".ini", ".cfg", ".css", ".scss", ".lua", ".r", ".m", ".scala", ".pl", ".el", ".vim",
        ".dockerfile", ".makefile", ".cmake"}
HTML = {".html", ".htm", ".xhtml"}
MAX_PDF_PAGES = 5000
PDF_SECONDS = 120.0  # a PDF that takes longer to read (a decompression bomb) keeps what was read
MAX_UNZIPPED = 200 * 2**20  # a DOCX or EPUB member larger than this once unpacked is a zip bomb
SNIFF_BYTES = 8192


def format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in MARKDOWN:
        return "markdown"
    if suffix in HTML:
        return "html"
    if suffix in CODE:
        return "code"
    if suffix in {".csv", ".tsv"}:
        return "csv"
    return {".pdf": "pdf", ".docx": "docx", ".epub": "epub"}.get(suffix, "text")


def extract(path: Path) -> tuple[str, list[Block]]:
    """The file's format and blocks; raises Skipped (or OSError if it cannot be read)."""
    kind = format_of(path)
    readers: dict[str, Callable[[Path], list[Block]]] = {
        "pdf": pdf_blocks, "docx": docx_blocks, "epub": epub_blocks,
    }
    if kind in readers:
        return kind, readers[kind](path)
    text = read_text(path)
    if kind == "markdown":
        return kind, markdown_blocks(text)
    if kind == "html":
        return kind, html_blocks(text)
    if kind == "csv":
        return kind, csv_blocks(text, "\t" if path.suffix.lower() == ".tsv" else None)
    return kind, line_blocks(text, code=kind == "code")


def read_text(path: Path) -> str:
    data = path.read_bytes()
    if b"\0" in data[:SNIFF_BYTES]:
        raise Skipped("a binary file (not text)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    if text.count("\ufffd") > len(text) // 100:
        raise Skipped("a binary file (not text in UTF-8 or Windows-1252)")
    return text


# -- text, code and Markdown: paragraphs with their lines ------------------------------

def _paragraphs(lines: list[str]) -> Iterator[tuple[int, int]]:
    """(first, last) 0-based line index of each run of non-blank lines."""
    start = None
    for n, line in enumerate(lines):
        if line.strip():
            start = n if start is None else start
        elif start is not None:
            yield start, n - 1
            start = None
    if start is not None:
        yield start, len(lines) - 1


def line_blocks(text: str, code: bool = False) -> list[Block]:
    lines = text.splitlines()
    return [Block("\n".join(lines[a:b + 1]).rstrip() if code else " ".join(s.strip() for s in lines[a:b + 1]),
                  {"lines": [a + 1, b + 1]}) for a, b in _paragraphs(lines)]


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    path: list[str] = []
    blocks: list[Block] = []
    start: int | None = None
    fenced = False

    def flush(end: int) -> None:
        nonlocal start
        if start is not None:
            body = "\n".join(lines[start:end]).strip()
            if body:
                blocks.append(Block(body, {"heading": list(path), "lines": [start + 1, end]}))
        start = None

    for n, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            flush(n)
            level = len(heading.group(1))
            path[level - 1:] = [heading.group(2)]
        elif not line.strip() and not fenced:
            flush(n)
        elif start is None:
            start = n
    flush(len(lines))
    return blocks


# -- CSV: each row with its header ----------------------------------------------------

def csv_blocks(text: str, delimiter: str | None) -> list[Block]:
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    rows = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(rows, None)
    if not header:
        return []
    header = [h.strip() or f"column {n + 1}" for n, h in enumerate(header)]
    blocks = []
    for n, row in enumerate(rows, start=2):  # the header is line 1
        cells = [f"{h}: {v.strip()}" for h, v in zip(header, row) if v.strip()]
        if cells:
            blocks.append(Block("; ".join(cells), {"rows": [n, n]}))
    return blocks


# -- PDF: pages ---------------------------------------------------------------------------

def pdf_blocks(path: Path) -> list[Block]:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Skipped("an encrypted PDF (it needs a password)")
        pages = reader.pages
        count = len(pages)
    except FileNotDecryptedError as exc:
        raise Skipped("an encrypted PDF (it needs a password)") from exc
    except PdfReadError as exc:
        raise Skipped(f"not a readable PDF: {exc}") from exc
    blocks: list[Block] = []
    began = time.monotonic()
    for n in range(min(count, MAX_PDF_PAGES)):
        if time.monotonic() - began > PDF_SECONDS:
            break
        try:
            text = pages[n].extract_text() or ""
        except Exception:  # one broken page (or a bomb's limit) costs that page only
            continue
        text = " ".join(text.split())
        if text:
            blocks.append(Block(text, {"page": n + 1}))
    if not blocks:
        raise Skipped(f"a PDF without text ({count} page(s): scanned images need OCR, which Wren does not do)")
    return blocks


# -- DOCX and EPUB: zipped XML ------------------------------------------------------------

def _member(archive: zipfile.ZipFile, name: str) -> bytes:
    info = archive.getinfo(name)
    if info.file_size > MAX_UNZIPPED:
        raise Skipped(f"{name} unpacks to {info.file_size / 2**20:,.0f} MB (a zip bomb?)")
    return archive.read(name)


def _open_zip(path: Path, what: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise Skipped(f"not a {what} file Wren can open (encrypted, or damaged)") from exc


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def docx_blocks(path: Path) -> list[Block]:
    with _open_zip(path, "DOCX") as archive:
        try:
            root = ElementTree.fromstring(_member(archive, "word/document.xml"))
        except (KeyError, ElementTree.ParseError) as exc:
            raise Skipped(f"a DOCX without a readable document: {exc}") from exc
    body = root.find(f"{_W}body")
    headings: list[str] = []
    blocks: list[Block] = []
    for n, element in enumerate(body if body is not None else []):
        if element.tag == f"{_W}tbl":
            for row in element.iter(f"{_W}tr"):
                cells = ["".join(t.text or "" for t in cell.iter(f"{_W}t")).strip() for cell in row.iter(f"{_W}tc")]
                if any(cells):
                    blocks.append(Block(" | ".join(cells), {"heading": list(headings), "paragraph": n + 1}))
            continue
        text = "".join(t.text or "" for t in element.iter(f"{_W}t")).strip()
        if not text:
            continue
        style = element.find(f"{_W}pPr/{_W}pStyle")
        name = style.get(f"{_W}val", "") if style is not None else ""
        level = _heading_level(name)
        if level:
            headings[level - 1:] = [text]
        else:
            blocks.append(Block(text, {"heading": list(headings), "paragraph": n + 1}))
    return blocks


def _heading_level(style: str) -> int:
    if style.lower() == "title":
        return 1
    found = re.fullmatch(r"[Hh]eading\s*([1-9])", style)
    return int(found.group(1)) if found else 0


def epub_blocks(path: Path) -> list[Block]:
    with _open_zip(path, "EPUB") as archive:
        try:
            chapters = _epub_spine(archive)
        except (KeyError, ElementTree.ParseError) as exc:
            raise Skipped(f"an EPUB without a readable table of contents: {exc}") from exc
        blocks = []
        for number, name in enumerate(chapters, start=1):
            html = _member(archive, name).decode("utf-8", errors="replace")
            blocks += [Block(b.text, {"chapter": number, **b.location}) for b in html_blocks(html)]
    return blocks


def _epub_spine(archive: zipfile.ZipFile) -> list[str]:
    container = ElementTree.fromstring(_member(archive, "META-INF/container.xml"))
    rootfile = next(e for e in container.iter() if e.tag.endswith("rootfile")).get("full-path", "")
    opf = ElementTree.fromstring(_member(archive, rootfile))
    folder = rootfile.rsplit("/", 1)[0] + "/" if "/" in rootfile else ""
    items = {e.get("id"): e.get("href") for e in opf.iter() if e.tag.endswith("}item")}
    spine = [e.get("idref") for e in opf.iter() if e.tag.endswith("}itemref")]
    names = set(archive.namelist())
    chapters = [folder + str(items[i]) for i in spine if i in items]
    return [name for name in chapters if name in names]
