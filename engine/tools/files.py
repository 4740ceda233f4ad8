"""Reading a file the user attached: text in its encoding, or a PDF's text layer, with a
clear refusal (ToolFailed) for what cannot be read. Used by the read_attachment tool and by
context assembly, which puts an attached file's text into the prompt."""

from __future__ import annotations

import codecs
from pathlib import Path

MAX_FILE_BYTES = 20 * 2**20  # an attachment larger than this is refused, not read
MAX_PDF_PAGES = 300
TEXT_SUFFIXES = {
    ".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".ini",
    ".cfg", ".conf", ".log", ".xml", ".html", ".htm", ".css", ".js", ".ts", ".tsx", ".jsx", ".py", ".pyi", ".c",
    ".h", ".cc", ".cpp", ".hpp", ".rs", ".go", ".java", ".kt", ".swift", ".rb", ".php", ".sh", ".bash", ".zsh",
    ".sql", ".r", ".m", ".lua", ".pl", ".tex", ".org", ".srt", ".vtt", ".env", ".gitignore", "",
}


READABLE = "text, Markdown, code, CSV and PDF can be read"
_BOMS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16's byte-order marks
SNIFF_BYTES = 64 * 1024  # what attachment_problem reads of a file


class ToolFailed(Exception):
    """A built-in tool refused its input; the message goes back to the model."""


def read_text_file(path: Path) -> str:
    """The text of an attached file; a clear ToolFailed for what cannot be read."""
    _check_file(path)
    if path.suffix.lower() == ".pdf":
        return _read_pdf(path)
    data = path.read_bytes()
    _check_not_binary(path, data)
    for encoding in ("utf-8-sig", "utf-16") if data.startswith(_BOMS) else ("utf-8-sig",):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    if path.suffix.lower() not in TEXT_SUFFIXES:
        raise ToolFailed(f"{path.name} is not UTF-8 text; {READABLE}")
    return data.decode("latin-1")


def attachment_problem(path: Path) -> str | None:
    """Why an attached file will not be read, from its first SNIFF_BYTES (said as it is
    attached, not only once the message is sent); None when it looks readable. A PDF is
    checked by its signature only: its text is read when the message is sent."""
    try:
        _check_file(path)
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
        if path.suffix.lower() == ".pdf":
            if not head.startswith(b"%PDF-"):
                raise ToolFailed(f"{path.name} is not a PDF (it does not start as one)")
            return None
        _check_not_binary(path, head)
        if not head.startswith(_BOMS) and path.suffix.lower() not in TEXT_SUFFIXES:
            try:  # the start of a longer file may end inside a character: not an error
                codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=len(head) < SNIFF_BYTES)
            except UnicodeDecodeError:
                raise ToolFailed(f"{path.name} is not UTF-8 text; {READABLE}") from None
    except ToolFailed as exc:
        return str(exc)
    except OSError as exc:
        return f"{path.name} cannot be read: {exc.strerror or exc}"
    return None


def _check_file(path: Path) -> None:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ToolFailed(f"{path.name} cannot be read: {exc.strerror or exc}") from None
    if not path.is_file():
        raise ToolFailed(f"{path.name} is not a file")
    if size > MAX_FILE_BYTES:
        raise ToolFailed(f"{path.name} is {size / 2**20:.1f} MB; files up to {MAX_FILE_BYTES // 2**20} MB can be read")


def _check_not_binary(path: Path, data: bytes) -> None:
    if b"\x00" in data[:8192] and not data.startswith(_BOMS):
        raise ToolFailed(f"{path.name} is a binary file, not text; {READABLE}")


def _read_pdf(path: Path) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception:
                raise ToolFailed(f"{path.name} is a password-protected PDF") from None
        pages = reader.pages
        count = len(pages)
        texts = []
        for i in range(min(count, MAX_PDF_PAGES)):
            texts.append(f"--- page {i + 1} ---\n{(pages[i].extract_text() or '').strip()}")
    except ToolFailed:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ToolFailed(f"{path.name} is not a readable PDF: {exc}") from None
    if count > MAX_PDF_PAGES:
        texts.append(f"[… the PDF has {count} pages; the first {MAX_PDF_PAGES} were read]")
    text = "\n\n".join(texts)
    if not any(t.split("\n", 1)[-1] for t in texts):
        raise ToolFailed(f"{path.name} has no text layer (a scanned PDF?); Wren cannot read images")
    return text
