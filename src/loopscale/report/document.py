"""A tiny document model rendered twice: Markdown (report.md, images linked) and self-contained HTML
(report.html, PNG images embedded as base64 data URIs, no external files or scripts)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from loopscale.published import path_from


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Image:
    path: Path  # a PNG file
    caption: str


@dataclass
class Pre:
    text: str


@dataclass
class Bullets:
    items: list[str]  # one paragraph each (Markdown **bold** and `code` allowed)


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # str (a paragraph), Bullets, Table, Image, Pre


@dataclass
class Document:
    title: str
    lead: list = field(default_factory=list)  # blocks under the title, before any section (the verdict)
    sections: list[Section] = field(default_factory=list)

    def markdown(self, base: Path) -> str:
        """Markdown with image links relative to ``base`` (the folder report.md is written to)."""
        out = [f"# {self.title}", ""]
        for title, blocks in [(None, self.lead), *((s.title, s.blocks) for s in self.sections)]:
            if title is not None:
                out += [f"## {title}", ""]
            for block in blocks:
                if isinstance(block, str):
                    out += [block, ""]
                elif isinstance(block, Bullets):
                    out += [f"- {item}" for item in block.items] + [""]
                elif isinstance(block, Table):
                    out.append("| " + " | ".join(map(_cell, block.header)) + " |")
                    out.append("|" + "---|" * len(block.header))
                    out += ["| " + " | ".join(map(_cell, row)) + " |" for row in block.rows]
                    out.append("")
                elif isinstance(block, Image):
                    caption = block.caption.replace("*", "\\*")  # L*, N* must not end the italics
                    out += [f"![{block.caption}]({path_from(base, block.path)})", f"*{caption}*", ""]
                elif isinstance(block, Pre):
                    out += ["```", block.text.rstrip("\n"), "```", ""]
        return "\n".join(out)

    def html(self) -> str:
        """One self-contained HTML page: every image is embedded, nothing is fetched."""
        esc = html.escape
        body = [f"<h1>{esc(self.title)}</h1>"]
        for title, blocks in [(None, self.lead), *((s.title, s.blocks) for s in self.sections)]:
            if title is None:
                body.append('<div class="lead">')
            else:
                body.append(f"<h2>{esc(title)}</h2>")
            for block in blocks:
                if isinstance(block, str):
                    body.append(f"<p>{_inline(block)}</p>")
                elif isinstance(block, Bullets):
                    body.append(
                        "<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in block.items) + "</ul>"
                    )
                elif isinstance(block, Table):
                    head = "".join(f"<th>{_inline(str(h))}</th>" for h in block.header)
                    rows = "".join(
                        "<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in row) + "</tr>"
                        for row in block.rows
                    )
                    body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
                elif isinstance(block, Image):
                    data = base64.b64encode(block.path.read_bytes()).decode("ascii")
                    body.append(
                        f'<figure><img alt="{esc(block.caption)}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{esc(block.caption)}</figcaption></figure>"
                    )
                elif isinstance(block, Pre):
                    body.append(f"<pre>{esc(block.text)}</pre>")
            if title is None:
                body.append("</div>")
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(self.title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body)
            + "\n</body></html>\n"
        )


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.45}"
    "table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #bbb;padding:.25rem .6rem;"
    "text-align:right}th{background:#f0f0f0}"
    ".lead{font-size:1.1rem;border-left:4px solid #888;padding-left:1rem}"
    "figure{margin:1rem 0}img{max-width:100%}pre{background:#f6f6f6;padding:.6rem;overflow-x:auto}"
)


def _cell(text: str) -> str:
    """A Markdown table cell: a literal '|' must not end the cell."""
    return str(text).replace("|", "\\|")


def _inline(text: str) -> str:
    """Escape a paragraph and turn Markdown **bold** and `code` into HTML."""
    parts = html.escape(text).split("**")
    text = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = text.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
