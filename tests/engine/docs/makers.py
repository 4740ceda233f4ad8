"""Small document files made in code for the library's tests and bench/docs.py: a PDF with
text pages (a real text layer: Helvetica, one text object per page), a DOCX and an EPUB."""

from __future__ import annotations

import io
import textwrap
import zipfile
import zlib
from pathlib import Path


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def pdf_bytes(pages: list[str], *, bomb_page: int | None = None) -> bytes:
    """A PDF with one page per text (an empty text: a page with no text, as a scan has);
    `bomb_page`: that page's content is a 100 MB stream of zeros compressed to ~100 KB."""
    objects: list[bytes] = []
    count = len(pages)
    kids = " ".join(f"{4 + 2 * n} 0 R" for n in range(count))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for n, text in enumerate(pages):
        lines = [line for para in text.split("\n") for line in (textwrap.wrap(para, 90) or [""])]
        ops = "BT /F1 11 Tf 50 750 Td 14 TL " + " ".join(f"{_pdf_string(line)} Tj T*" for line in lines) + " ET"
        if n == bomb_page:
            data = zlib.compress(b"0" * (100 * 2**20), 9)
            stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
        else:
            raw = ops.encode("latin-1", errors="replace") if text else b""
            stream = b"<< /Length %d >>\nstream\n" % len(raw) + raw + b"\nendstream"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * n} 0 R >>".encode())
        objects.append(stream)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def write_pdf(path: Path, pages: list[str], **kwargs) -> Path:
    path.write_bytes(pdf_bytes(pages, **kwargs))
    return path


def write_encrypted_pdf(path: Path, pages: list[str]) -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(pages))))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="AES-128")
    with open(path, "wb") as f:
        writer.write(f)
    return path


_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_docx(path: Path, items: list[tuple[str, str]]) -> Path:
    """items: (style, text); a style of "Heading1".."Heading9" makes a heading, "" a paragraph."""
    body = []
    for style, text in items:
        props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
        body.append(f"<w:p>{props}<w:r><w:t>{_esc(text)}</w:t></w:r></w:p>")
    document = f'<?xml version="1.0" encoding="UTF-8"?><w:document {_W}><w:body>{"".join(body)}</w:body></w:document>'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
                   'package/2006/content-types"/>')
        z.writestr("word/document.xml", document)
    return path


def write_epub(path: Path, chapters: list[tuple[str, list[str]]]) -> Path:
    """chapters: (title, paragraphs)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/epub+zip")
        z.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" '
                   'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
                   'full-path="OEBPS/book.opf" media-type="application/oebps-package+xml"/></rootfiles></container>')
        items, refs = [], []
        for n, (title, paras) in enumerate(chapters, start=1):
            html = (f"<html><body><h1>{_esc(title)}</h1>" + "".join(f"<p>{_esc(p)}</p>" for p in paras)
                    + "</body></html>")
            z.writestr(f"OEBPS/ch{n}.xhtml", html)
            items.append(f'<item id="c{n}" href="ch{n}.xhtml" media-type="application/xhtml+xml"/>')
            refs.append(f'<itemref idref="c{n}"/>')
        z.writestr("OEBPS/book.opf", '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" '
                   f'version="3.0"><manifest>{"".join(items)}</manifest><spine>{"".join(refs)}</spine></package>')
    return path
