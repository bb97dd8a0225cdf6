"""A report as data (sections of paragraphs, tables and figures), rendered to Markdown and HTML.

Building the content once and rendering it twice is what keeps report.md and report.html
saying the same thing. Every string that may come from a result file is escaped by the
renderer, in both formats, never by the code that builds the content: a GPU name or layout
holding markup shows as text.
"""

from __future__ import annotations

import base64
import html
import re
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
    # Columns (by index) whose cells are numbers: right-aligned so that digits line up.
    numeric: Sequence[int] = ()


@dataclass
class Figure:
    """An SVG figure: inlined in HTML; from Markdown linked by its relative path, or embedded when it has none."""

    svg: str
    path: str | None
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
    # A one-line summary: the HTML collapses the section behind it (all-pass tables a reader may skip).
    summary: str | None = None

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-") or "section"


# C0 and C1 control characters but tab: an ANSI escape in a layout or folder name must not reach a
# terminal or a page as a control sequence; it is shown as its escape, \x1b.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(value: Any) -> str:
    """Text with every control character (but tab and newline) written as its escape."""
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), str(value))


def _h(value: Any) -> str:
    return html.escape(clean(value))


# What an embedded SVG may not hold: scripts, event handlers, links out of the page, external
# entities or embedded documents. The kit's own figures hold none of these.
_UNSAFE_SVG = re.compile(r"<\s*script|\son\w+\s*=|javascript:|<\s*foreignObject|<!ENTITY|<\s*iframe|<\s*embed|"
                         r"<\s*object|(?:xlink:)?href\s*=\s*[\"'](?!#)", re.IGNORECASE)


def safe_svg(text: str, where: str) -> str:
    """An SVG to embed in a page, or one sentence on why not (KitError): a figure is drawn by the
    kit; one from elsewhere is embedded only when it can do nothing but be looked at."""
    from kernelkit import KitError

    found = _UNSAFE_SVG.search(text)
    if found or "<svg" not in text:
        what = f"'{clean(found.group(0))}'" if found else "no <svg> element"
        raise KitError(f"figure {clean(where)} holds {what}; the report embeds only plain SVG (no scripts, event "
                       "handlers or external references)")
    return text


_MD_SPECIAL = re.compile(r"([\\`*\[\]|#!{}])")
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_escape(value: Any) -> str:
    """Text as Markdown shows it literally: markup characters backslash-escaped, one line."""
    text = _MD_SPECIAL.sub(r"\\\1", clean(str(value).replace("\n", " ").replace("\r", " ")))
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    # A line that starts like a list item or a numbered list must not become one.
    return re.sub(r"^([-+>]|\d+[.)])(\s)", r"\\\1\2", text)


def _table_markdown(table: Table) -> str:
    aligns = ["---:" if i in table.numeric else "---" for i in range(len(table.header))]
    lines = ["| " + " | ".join(map(md_escape, table.header)) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(map(md_escape, row)) + " |" for row in table.rows]
    return "\n".join(lines)


def contents(sections: Sequence[Section]) -> list[Section]:
    return [s for s in sections if s.level == 2]


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    out = [f"# {md_escape(title)}", "Contents: " + " · ".join(
        f"[{md_escape(s.title)}](#{s.anchor})" for s in contents(sections))]
    for section in sections:
        out.append(f"{'#' * section.level} {md_escape(section.title)}")
        if section.summary:
            out.append(f"*{md_escape(section.summary)}*")
        for block in section.blocks:
            if isinstance(block, Paragraph):
                out.append(f"> {md_escape(block.text)}" if block.css_class == "banner" else md_escape(block.text))
            elif isinstance(block, Bullets):
                out.append("\n".join(f"- {md_escape(item)}" for item in block.items))
            elif isinstance(block, Table):
                out.append(_table_markdown(block))
            elif isinstance(block, Figure):
                target = block.path or "data:image/svg+xml;base64," + base64.b64encode(block.svg.encode()).decode()
                out.append(f"![{md_escape(block.caption)}]({target})\n\n*{md_escape(block.caption)}*")
    return "\n\n".join(out) + "\n"


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:76rem;margin:1.5rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:0.8rem 0;font-size:0.88rem}
th,td{border:1px solid #ccc;padding:0.2rem 0.5rem;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#f2f2f2} figure{margin:1rem 0} figcaption{font-style:italic;font-size:0.9rem}
svg{max-width:100%;height:auto} nav.toc{font-size:0.9rem;margin:0.5rem 0 1rem}
details{margin:0.6rem 0;border:1px solid #ddd;padding:0.3rem 0.6rem} details>summary{cursor:pointer}
section.answers{border:2px solid #446;padding:0 1rem;background:#f8f8fc}
section.answers figure{display:inline-block;margin:0.2rem 0.8rem 0.2rem 0;vertical-align:top;max-width:30%}
section.answers figcaption{font-size:0.8rem}
.banner{border:2px solid #b35900;background:#fff4e5;padding:0.5rem 0.8rem}
.verdict-same{color:#57606a}.verdict-faster{color:#1a7f37;font-weight:600}
.verdict-slower{color:#cf222e;font-weight:600}.verdict-ambiguous{color:#9a6700;font-weight:600}
.verdict-measured{color:#0550ae}
"""


def _html_cell(cell: Any) -> str:
    if isinstance(cell, Marked):
        return f'<span class="{_h(cell.css_class)}">{_h(cell.text)}</span>'
    return _h(str(cell))


def _block_html(block: Block) -> str:
    if isinstance(block, Paragraph):
        css = f' class="{_h(block.css_class)}"' if block.css_class else ""
        return f"<p{css}>{_h(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{_h(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Table):
        head = "".join(f"<th>{_h(str(cell))}</th>" for cell in block.header)
        cells = ['<td class="num">' if i in block.numeric else "<td>" for i in range(len(block.header))]
        body = "".join("<tr>" + "".join(f"{cells[i] if i < len(cells) else '<td>'}{_html_cell(cell)}</td>"
                                        for i, cell in enumerate(row)) + "</tr>" for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    # SVG from matplotlib or the kit's own writers: every text in it is XML-escaped where it is written.
    return f"<figure>{block.svg}<figcaption>{_h(block.caption)}</figcaption></figure>"


def render_html(title: str, sections: Sequence[Section], meta: dict[str, str] | None = None) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        *(f'<meta name="{_h(k)}" content="{_h(v)}">' for k, v in (meta or {}).items()),
        f"<title>{_h(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_h(title)}</h1>",
        '<nav class="toc">Contents: ' + " · ".join(
            f'<a href="#{s.anchor}">{_h(s.title)}</a>' for s in contents(sections)) + "</nav>",
    ]
    for section in sections:
        heading = f'<h{section.level} id="{section.anchor}">{_h(section.title)}</h{section.level}>'
        body = "\n".join(_block_html(block) for block in section.blocks)
        if section.summary:
            out.append(f"{heading}\n<details><summary>{_h(section.summary)}</summary>\n{body}\n</details>")
        elif section.anchor == "answers":
            out.append(f'<section class="answers" id="answers-block">{heading}\n{body}</section>')
        else:
            out.append(f"{heading}\n{body}")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
