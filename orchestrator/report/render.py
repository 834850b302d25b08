"""Documents from a Report: Markdown (figures linked) and one self-contained HTML page."""

from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .assemble import Report


def to_markdown(report: Report, image_dir: str = ".") -> str:
    """The report as Markdown; figures are linked (``image_dir``/<name>.png)."""
    out = [f"# {report.title}", ""]
    if report.summary:
        out += ["## Summary", ""] + [f"- {line}" for line in report.summary] + [""]
    for t in report.tables:
        out += [f"## {t.title}", ""]
        if not t.rows:
            out += ["(no runs)", ""]
        else:
            out.append("| " + " | ".join(_md(c) for c in t.columns) + " |")
            out.append("|" + "|".join("---" if t.is_text(i) else "---:"
                                      for i in range(len(t.columns))) + "|")
            out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in t.rows]
            out.append("")
        if t.note:
            out += [f"*{_md(t.note)}*", ""]
    if report.figures:
        out += ["## Figures", ""]
        for name in report.figures:
            title = report.figure_titles.get(name, name)
            out += [f"### {title}", "", f"![{title}]({image_dir.rstrip('/')}/{name})", ""]
    return "\n".join(out)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 0.3em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.note { color: #555; font-size: 0.85em; max-width: 1100px; }
img { max-width: 100%; border: 1px solid #eee; }
""".strip()


def to_html(report: Report) -> str:
    """The report as one self-contained HTML page: figures embedded as base64 PNG."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(report.title)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<h1>{e(report.title)}</h1>"]
    if report.summary:
        out.append("<h2>Summary</h2><ul>" + "".join(f"<li>{e(s)}</li>" for s in report.summary)
                   + "</ul>")
    for t in report.tables:
        out.append(f'<h2 id="{e(t.key)}">{e(t.title)}</h2>')
        if not t.rows:
            out.append("<p>(no runs)</p>")
        else:
            head = "".join(f"<th>{e(c)}</th>" for c in t.columns)
            cell = ["<td>" if t.is_text(i) else '<td class="num">'
                    for i in range(len(t.columns))]
            body = "".join("<tr>" + "".join(f"{cell[i]}{e(str(c))}</td>"
                                            for i, c in enumerate(row)) + "</tr>"
                           for row in t.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        if t.note:
            out.append(f'<p class="note">{e(t.note)}</p>')
    if report.figures:
        out.append("<h2>Figures</h2>")
        for name, png in report.figures.items():
            title = report.figure_titles.get(name, name)
            data = base64.b64encode(png).decode("ascii")
            out.append(f"<h3>{e(title)}</h3>"
                       f'<img alt="{e(title)}" src="data:image/png;base64,{data}">')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
