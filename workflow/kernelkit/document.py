"""A report as data (sections of paragraphs, tables and figures), rendered to Markdown and HTML.

Building the content once and rendering it twice is what keeps report.md and report.html
saying the same thing. Every string that may come from a result file is escaped by the
renderer, never by the code that builds the content.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence, Union


@dataclass
class Paragraph:
    """Text; `css_class` "banner" makes it a block quote in Markdown and a framed box in HTML."""

    text: str
    css_class: str = ""


@dataclass
class Marked:
    """A table cell with a CSS class in the HTML (a verdict's colour); plain text in Markdown."""

    text: str
    css_class: str

    def __str__(self) -> str:
        return self.text


@dataclass
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[Any]]


@dataclass
class Figure:
    """An SVG figure: inlined in HTML, linked by its relative path from Markdown."""

    svg: str
    path: str
    caption: str


@dataclass
class Bullets:
    items: Sequence[str]


Block = Union[Paragraph, Table, Figure, Bullets]


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2


def _md_cell(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    out = [f"# {title}"]
    for section in sections:
        out.append(f"{'#' * section.level} {section.title}")
        for block in section.blocks:
            if isinstance(block, Paragraph):
                out.append(f"> {block.text}" if block.css_class == "banner" else block.text)
            elif isinstance(block, Bullets):
                out.append("\n".join(f"- {item}" for item in block.items))
            elif isinstance(block, Table):
                lines = ["| " + " | ".join(map(_md_cell, block.header)) + " |", "|" + "---|" * len(block.header)]
                lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in block.rows]
                out.append("\n".join(lines))
            elif isinstance(block, Figure):
                out.append(f"![{block.caption}]({block.path})\n\n*{block.caption}*")
    return "\n\n".join(out) + "\n"


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:0.8rem 0;font-size:0.9rem}
th,td{border:1px solid #ccc;padding:0.25rem 0.5rem;text-align:left;vertical-align:top}
th{background:#f2f2f2} figure{margin:1rem 0} figcaption{font-style:italic;font-size:0.9rem}
svg{max-width:100%;height:auto}
.banner{border:2px solid #b35900;background:#fff4e5;padding:0.5rem 0.8rem}
.verdict-same{color:#57606a}.verdict-faster{color:#1a7f37;font-weight:600}
.verdict-slower{color:#cf222e;font-weight:600}.verdict-ambiguous{color:#9a6700;font-weight:600}
.verdict-measured{color:#0550ae}
"""


def _html_cell(cell: Any) -> str:
    if isinstance(cell, Marked):
        return f'<span class="{html.escape(cell.css_class)}">{html.escape(cell.text)}</span>'
    return html.escape(str(cell))


def render_html(title: str, sections: Sequence[Section]) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for section in sections:
        out.append(f"<h{section.level}>{html.escape(section.title)}</h{section.level}>")
        for block in section.blocks:
            if isinstance(block, Paragraph):
                css = f' class="{html.escape(block.css_class)}"' if block.css_class else ""
                out.append(f"<p{css}>{html.escape(block.text)}</p>")
            elif isinstance(block, Bullets):
                out.append("<ul>" + "".join(f"<li>{html.escape(item)}</li>" for item in block.items) + "</ul>")
            elif isinstance(block, Table):
                head = "".join(f"<th>{html.escape(str(cell))}</th>" for cell in block.header)
                body = "".join(
                    "<tr>" + "".join(f"<td>{_html_cell(cell)}</td>" for cell in row) + "</tr>" for row in block.rows
                )
                out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            elif isinstance(block, Figure):
                # matplotlib XML-escapes every text it writes into the SVG, labels from result files included.
                out.append(f"<figure>{block.svg}<figcaption>{html.escape(block.caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
