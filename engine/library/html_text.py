"""An HTML page's main text as blocks under their headings: navigation, menus, headers,
footers, forms and scripts are left out (stdlib html.parser; no DOM is built)."""

from __future__ import annotations

from html.parser import HTMLParser

from .blocks import Block

# Elements whose text is page furniture, not content.
SKIPPED = {"script", "style", "noscript", "template", "svg", "nav", "header", "footer", "aside", "form",
           "menu", "button", "select", "iframe", "head"}
SKIPPED_ROLES = {"navigation", "banner", "contentinfo", "menu", "menubar", "search", "complementary"}
BLOCKS = {"p", "div", "li", "tr", "td", "th", "section", "article", "main", "blockquote", "pre", "dd", "dt",
          "table", "ul", "ol", "br", "hr", "figcaption", "caption"}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


class _MainText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skipping: list[str] = []  # open furniture elements
        self.text: list[str] = []
        self.heading: int = 0  # the level of the heading being read
        self.path: list[str] = []
        self.blocks: list[tuple[str, list[str], int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        role = dict(attrs).get("role") or ""
        if self.skipping or tag in SKIPPED or role in SKIPPED_ROLES:
            if tag not in VOID:
                self.skipping.append(tag)
            return
        if tag in HEADINGS:
            self.flush()
            self.heading = HEADINGS[tag]
        elif tag in BLOCKS:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if self.skipping:
            if tag in self.skipping:
                while self.skipping and self.skipping.pop() != tag:
                    pass
            return
        if tag in HEADINGS and self.heading:
            title = " ".join("".join(self.text).split())
            self.text = []
            if title:
                self.path[self.heading - 1:] = [title]
            self.heading = 0
        elif tag in BLOCKS:
            self.flush()

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.text.append(data)

    def flush(self) -> None:
        if self.heading:
            return
        text = " ".join("".join(self.text).split())
        self.text = []
        if text:
            self.blocks.append((text, list(self.path), self.getpos()[0]))


def html_blocks(html: str) -> list[Block]:
    parser = _MainText()
    parser.feed(html)
    parser.close()
    parser.flush()
    return [Block(text, {"heading": path, "lines": [line, line]}) for text, path, line in parser.blocks]
