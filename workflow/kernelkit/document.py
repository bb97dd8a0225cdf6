"""A report as data (sections of paragraphs, tables and figures), rendered to Markdown and HTML.

Built once and rendered twice, so that report.md and report.html say the same thing. Every string
that may come from a result file is escaped by the renderer, never by the builder: a GPU name or
layout holding markup shows as text.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from typing import Any, Sequence, Union
from urllib.parse import quote

from kernelkit import KitError


@dataclass
class _Plain:
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class Marked(_Plain):
    """A table cell with a CSS class in the HTML (a verdict's colour); plain text in Markdown."""

    css_class: str


@dataclass
class Link(_Plain):
    """Text that links to a file of the run (a record, a claims file) by a relative path: inline in a
    `Text`, a bullet or a table cell. A link may not name a scheme or a host (`safe_href`)."""

    href: str


@dataclass
class Strong(_Plain):
    """Text set in bold: the name that leads an answer."""


Inline = Union[str, Link, Strong]


@dataclass
class Text:
    """A paragraph of text (and links); `css_class` "banner" makes it a block quote in Markdown and a
    framed box in HTML."""

    parts: Union[str, Sequence[Inline]]
    css_class: str = ""

    @property
    def text(self) -> str:
        return "".join(map(str, [self.parts] if isinstance(self.parts, str) else self.parts))


Paragraph = Text


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
    # Laid out beside its neighbours at its own width (the history page's small figures).
    small: bool = False


@dataclass
class Bullets:
    """A list; an item is text, or a sequence of text and links."""

    items: Sequence[Union[str, Sequence[Inline]]]


@dataclass
class Details:
    """Blocks a reader may skip (per-sample tables, per-repeat detail): collapsed behind `summary` in
    HTML; in Markdown the summary in italics, then the blocks."""

    summary: str
    blocks: Sequence[Any]


Block = Union[Text, Table, Figure, Bullets, Details]


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    # A one-line summary: the HTML collapses the section behind it (all-pass tables a reader may skip).
    summary: str | None = None
    # The first `box` blocks, with the heading, form the framed answer block (id "answers-block") in
    # HTML; the blocks after it follow outside the frame.
    box: int = 0

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
# entities or embedded documents. The kit's own figures hold none of these; their sample dots are
# an inline PNG (matplotlib's rasterized artists), which can only be looked at.
_UNSAFE_SVG = re.compile(r"<\s*script|\son\w+\s*=|javascript:|<\s*foreignObject|<!ENTITY|<\s*iframe|<\s*embed|"
                         r"<\s*object|(?:xlink:)?href\s*=\s*[\"'](?!#|data:image/png;base64,)", re.IGNORECASE)


def safe_svg(text: str, where: str) -> str:
    """An SVG to embed in a page, or one sentence on why not (KitError): a figure is drawn by the
    kit; one from elsewhere is embedded only when it can do nothing but be looked at."""
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


_SCHEME = re.compile(r"^\s*(?:[A-Za-z][A-Za-z0-9+.-]*:|//|\\\\)")


def safe_href(href: str) -> str:
    """A link target the page may hold: a relative path or a #fragment, percent-encoded; a target
    that names a scheme (javascript:, https:) or a host is refused with one sentence (KitError)."""
    text = clean(href)
    if _SCHEME.match(text):
        raise KitError(f"link target {text[:80]} names a scheme or host; the report links only to files beside it")
    return quote(text, safe="/#._-~%")


def _inline_markdown(parts: Union[str, Sequence[Inline]]) -> str:
    return "".join(f"[{md_escape(part.text)}]({safe_href(part.href)})" if isinstance(part, Link)
                   else f"**{md_escape(part.text)}**" if isinstance(part, Strong) else md_escape(part)
                   for part in (parts if isinstance(parts, (list, tuple)) else [parts]))


def _inline_html(parts: Union[str, Sequence[Inline]]) -> str:
    return "".join(f'<a href="{_h(safe_href(part.href))}">{_h(part.text)}</a>' if isinstance(part, Link)
                   else f"<strong>{_h(part.text)}</strong>" if isinstance(part, Strong) else _h(part)
                   for part in (parts if isinstance(parts, (list, tuple)) else [parts]))


def _block_markdown(block: Any) -> str:
    if isinstance(block, Text):
        return ("> " if block.css_class == "banner" else "") + _inline_markdown(block.parts)
    if isinstance(block, Bullets):
        return "\n".join(f"- {_inline_markdown(item)}" for item in block.items)
    if isinstance(block, Table):
        aligns = ["---:" if i in block.numeric else "---" for i in range(len(block.header))]
        return "\n".join(["| " + " | ".join(map(md_escape, block.header)) + " |", "|" + "|".join(aligns) + "|"]
                         + ["| " + " | ".join(map(_inline_markdown, row)) + " |" for row in block.rows])
    if isinstance(block, Details):
        return "\n\n".join([f"*{md_escape(block.summary)}*", *(_block_markdown(b) for b in block.blocks)])
    target = block.path or "data:image/svg+xml;base64," + base64.b64encode(block.svg.encode()).decode()
    return f"![{md_escape(block.caption)}]({target})\n\n*{md_escape(block.caption)}*"


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    out = [f"# {md_escape(title)}", "Contents: " + " · ".join(
        f"[{md_escape(s.title)}](#{s.anchor})" for s in sections)]
    for section in sections:
        out.append(f"## {md_escape(section.title)}")
        if section.summary:
            out.append(f"*{md_escape(section.summary)}*")
        out += [_block_markdown(block) for block in section.blocks]
    return "\n\n".join(out) + "\n"


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:76rem;margin:1rem auto;padding:0 1rem;color:#222;
line-height:1.4;overflow-wrap:break-word} h1{font-size:1.5rem;margin:0.4rem 0} h2{font-size:1.3rem;margin:1.4rem 0 0.5rem}
table{border-collapse:collapse;margin:0.6rem 0;font-size:0.85rem;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ccc;padding:0.15rem 0.45rem;text-align:left;vertical-align:top} th{background:#f2f2f2}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap} svg{max-width:100%;height:auto}
figure{margin:0.8rem 0;max-width:100%} figcaption{font-style:italic;font-size:0.9rem} details>summary{cursor:pointer}
figure.small{display:inline-block;vertical-align:top;margin:0.4rem 0.6rem 0.4rem 0} nav.toc{font-size:0.9rem;margin:0.3rem 0 0.6rem}
details{margin:0.5rem 0;border:1px solid #ddd;padding:0.3rem 0.6rem} details.section>summary>span{color:#444}
details.section{border:none;border-top:1px solid #ccc;padding:0.3rem 0;margin:0.3rem 0}
details.section>summary>h2{display:inline;font-size:1.1rem;margin:0} section.answers h2{margin:0.5rem 0 0.3rem}
section.answers{border:2px solid #446;padding:0 0.9rem 0.2rem;background:#f8f8fc;font-size:0.94rem;line-height:1.35}
section.answers p{margin:0.35rem 0} section.answers ul{margin:0.3rem 0;padding-left:1.2rem}
section.answers li{margin:0.25rem 0}
.banner{border:2px solid #b35900;background:#fff4e5;padding:0.5rem 0.8rem} .verdict-same{color:#57606a}
.verdict-faster{color:#1a7f37;font-weight:600} .verdict-slower{color:#cf222e;font-weight:600}
.verdict-ambiguous{color:#9a6700;font-weight:600} .verdict-measured{color:#0550ae}
"""


def _cell_html(cell: Any) -> str:
    return f'<span class="{_h(cell.css_class)}">{_h(cell.text)}</span>' if isinstance(cell, Marked) else _inline_html(cell)


def _block_html(block: Block) -> str:
    if isinstance(block, Text):
        css = f' class="{_h(block.css_class)}"' if block.css_class else ""
        return f"<p{css}>{_inline_html(block.parts)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{_inline_html(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Details):
        return (f"<details><summary>{_h(block.summary)}</summary>\n"
                + "\n".join(_block_html(b) for b in block.blocks) + "\n</details>")
    if isinstance(block, Table):
        head = "".join(f"<th>{_h(str(cell))}</th>" for cell in block.header)
        cells = ['<td class="num">' if i in block.numeric else "<td>" for i in range(len(block.header))]
        body = "".join("<tr>" + "".join(f"{cells[i] if i < len(cells) else '<td>'}{_cell_html(cell)}</td>"
                                        for i, cell in enumerate(row)) + "</tr>" for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    # SVG from matplotlib or the kit's own writers: every text in it is XML-escaped where it is written.
    css = ' class="small"' if block.small else ""
    return f"<figure{css}>{block.svg}<figcaption>{_h(block.caption)}</figcaption></figure>"


def render_html(title: str, sections: Sequence[Section], meta: dict[str, str] | None = None) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        *(f'<meta name="{_h(k)}" content="{_h(v)}">' for k, v in (meta or {}).items()),
        f"<title>{_h(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_h(title)}</h1>",
        '<nav class="toc">Contents: ' + " · ".join(
            f'<a href="#{s.anchor}">{_h(s.title)}</a>' for s in sections) + "</nav>",
    ]
    for section in sections:
        heading = f'<h2 id="{section.anchor}">{_h(section.title)}</h2>'
        blocks = [_block_html(block) for block in section.blocks]
        if section.summary:
            # The heading sits in the summary line, so a collapsed section takes one line of the page.
            summary = section.summary
            if summary.lower().startswith(section.title.lower() + ":"):
                summary = summary[len(section.title) + 1:].strip()
            out.append(f'<details class="section"><summary>{heading} <span>{_h(summary)}</span></summary>\n'
                       + "\n".join(blocks) + "\n</details>")
        elif section.box:
            out.append(f'<section class="answers" id="answers-block">{heading}\n' + "\n".join(blocks[:section.box])
                       + "</section>\n" + "\n".join(blocks[section.box:]))
        else:
            out.append(f"{heading}\n" + "\n".join(blocks))
    out.append("</body></html>")
    return "\n".join(out) + "\n"
