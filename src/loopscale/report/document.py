"""The report's document model, rendered twice: Markdown (report.md, PNG figures linked) and one
self-contained HTML page (report.html from the Jinja2 template ``templates/report.html.j2``: SVG figures
inlined, PNG where no SVG exists embedded as a data URI, nothing fetched from elsewhere).

Text in paragraphs, bullets, table cells and captions is Markdown inline syntax (``**bold**``, ```code```,
``[link](target)``); the HTML renders it with markdown-it (raw HTML in the text is escaped), so no Markdown
marker reaches the page."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from loopscale.published import path_from


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Image:
    path: Path  # a PNG file; report.html shows the SVG beside it (same stem) when there is one
    caption: str


@dataclass
class Pre:
    text: str


@dataclass
class Bullets:
    items: list[str]  # one paragraph each (Markdown inline syntax)


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # str (a paragraph), Bullets, Table, Image, Pre
    collapsed: bool = False  # report.html: the section starts closed (the run table, the fit output)


@dataclass
class Document:
    """``lead``: the verdict paragraphs under the title; ``headline``: the table of headline numbers;
    ``key_figures``: the figures of the first screen; then the sections in order."""

    title: str
    lead: list = field(default_factory=list)
    headline: Table | None = None
    key_figures: list[Image] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def markdown(self, base: Path) -> str:
        """Markdown with image links relative to ``base`` (the folder report.md is written to)."""
        out = [f"# {self.title}", ""]
        first = [*self.lead, *([self.headline] if self.headline else []), *self.key_figures]
        for title, blocks in [(None, first), *((s.title, s.blocks) for s in self.sections)]:
            if title is not None:
                out += [f"## {title}", ""]
            for block in blocks:
                out += _markdown_block(block, base) + [""]
        return "\n".join(out)

    def html(self) -> str:
        """One self-contained HTML page: every figure is inlined, nothing is fetched."""
        anchors = _anchors([s.title for s in self.sections])
        return _template().render(doc=self, sections=list(zip(anchors, self.sections)))


def _markdown_block(block, base: Path) -> list[str]:
    if isinstance(block, str):
        return [block]
    if isinstance(block, Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Table):
        return [
            "| " + " | ".join(map(_cell, block.header)) + " |",
            "|" + "---|" * len(block.header),
            *("| " + " | ".join(map(_cell, row)) + " |" for row in block.rows),
        ]
    if isinstance(block, Image):
        caption = block.caption.replace("*", "\\*")  # L*, N* must not end the italics
        return [f"![{block.caption}]({path_from(base, block.path)})", f"*{caption}*"]
    if isinstance(block, Pre):
        return ["```", block.text.rstrip("\n"), "```"]
    raise TypeError(f"not a report block: {block!r}")


def _cell(text: str) -> str:
    """A Markdown table cell: a literal '|' must not end the cell."""
    return str(text).replace("|", "\\|")


def _anchors(titles: list[str]) -> list[str]:
    """One HTML id per section title: its first words in lower case, joined by '-', made unique."""
    seen: set[str] = set()
    out = []
    for title in titles:
        head = title.split("(")[0].lower()
        words = "".join(c if c.isalnum() or c == "_" else " " for c in head).split()
        anchor = "-".join(words[:5]) or "section"
        while anchor in seen:
            anchor += "-2"
        seen.add(anchor)
        out.append(anchor)
    return out


@cache
def _template():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("loopscale.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["inline"] = inline_html
    env.filters["figure"] = figure_html
    env.tests["table"] = lambda block: isinstance(block, Table)
    env.tests["bullets"] = lambda block: isinstance(block, Bullets)
    env.tests["image"] = lambda block: isinstance(block, Image)
    env.tests["pre"] = lambda block: isinstance(block, Pre)
    return env.get_template("report.html.j2")


@cache
def _markdown_it():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})  # raw HTML in report text is shown, not run


def inline_html(text) -> str:
    """Markdown inline syntax (bold, code, links) of one paragraph or table cell as HTML (Markup)."""
    from markupsafe import Markup

    return Markup(_markdown_it().renderInline(str(text)))


def _without_prologue(svg: str) -> str:
    """An SVG file's text from its <svg> element on: the XML declaration and DOCTYPE before it removed
    (HTML inlines the element itself)."""
    while True:
        svg = svg.lstrip()
        for start, end in (("<?xml", "?>"), ("<!DOCTYPE", ">")):
            if svg.startswith(start):
                svg = svg[svg.index(end) + len(end) :]
                break
        else:
            return svg


def figure_html(image: Image) -> str:
    """The figure's SVG inline (crisp, its text searchable) or, without one, its PNG as a data URI."""
    from markupsafe import Markup, escape

    svg = image.path.with_suffix(".svg")
    if svg.is_file():
        text = _without_prologue(svg.read_text())
        return Markup(text.replace("<svg ", f'<svg role="img" aria-label="{escape(image.caption)}" ', 1))
    data = base64.b64encode(image.path.read_bytes()).decode("ascii")
    return Markup(f'<img alt="{escape(image.caption)}" src="data:image/png;base64,{data}">')
