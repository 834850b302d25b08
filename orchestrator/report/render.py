"""Documents from a Report: Markdown (figures linked) and one self-contained HTML page.

Both lead with what a person looks at first: the summary, the lead figures and the overview
table; then, folded (``<details>``, which GitHub's Markdown and every browser open on a
click), the flagged predictions' reasons, the notes per configuration, the detail tables and
the other figures. The HTML page carries its style and its figures (base64 PNG) inside it:
it opens the same from a mail attachment, a CI artifact or a laptop without a network.
"""

from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .assemble import Report
    from .tables import Table


def to_markdown(report: Report, image_dir: str = ".") -> str:
    """The report as Markdown; figures are linked (``image_dir``/<name>.png)."""
    def figure(name: str) -> list[str]:
        title = report.figure_titles.get(name, name)
        return [f"![{title}]({image_dir.rstrip('/')}/{name})", ""]

    out = [f"# {report.title}", ""]
    if report.summary:
        out += ["## Summary", ""] + [f"- {line}" for line in report.summary] + [""]
    for name in report.lead_figures():
        out += figure(name)
    if report.overview is not None:
        out += _md_table(report.overview)
    if report.flagged:
        out += [_md_fold(f"Flagged predictions: {len(report.flagged)} reason(s)"), ""]
        for reason, runs in report.flagged:
            out += [f"- **{_md(reason)}**: {', '.join(runs)}"]
        out += ["", "</details>", ""]
    if report.notes:
        out += [_md_fold("Notes per configuration"), ""]
        out += [f"- {_md(line)}" for line in report.notes] + ["", "</details>", ""]
    if report.tables:
        out += [_md_fold(f"Detail: {len(report.tables)} tables"), ""]
        for t in report.tables:
            out += _md_table(t)
        out += ["</details>", ""]
    others = report.other_figures()
    if others:
        out += [_md_fold(f"More figures: {len(others)}"), ""]
        for name in others:
            out += [f"### {report.figure_titles.get(name, name)}", "", *figure(name)]
        out += ["</details>", ""]
    return "\n".join(out)


def _md_fold(summary: str) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>"


def _md_table(t: Table) -> list[str]:
    out = [f"## {t.title}", ""]
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
    return out


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# One page, no network: the system's fonts, no script, no request for anything.
_CSS = """
:root { --ink: #1d2530; --muted: #5b6675; --line: #d9dee5; --head: #f2f4f7; --accent: #1f5fa8;
        --warn: #9a5b00; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: var(--ink); background: #fafbfc; line-height: 1.45; }
header { background: var(--ink); color: #fff; padding: 18px 32px; }
header h1 { margin: 0; font-size: 1.35em; font-weight: 600; }
header p { margin: 4px 0 0; color: #c9d1db; font-size: 0.9em; }
main { max-width: 1280px; margin: 0 auto; padding: 20px 32px 48px; }
section.summary { background: #fff; border: 1px solid var(--line); border-left: 4px solid
                  var(--accent); border-radius: 6px; padding: 12px 20px; margin-bottom: 20px; }
section.summary ul { margin: 0; padding-left: 1.2em; }
section.summary li { margin: 4px 0; }
.figures { display: flex; flex-wrap: wrap; gap: 16px; margin-bottom: 20px;
           align-items: flex-start; }
figure { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: 6px;
         padding: 10px; flex: 0 1 auto; }
.figures.lead figure { flex: 1 1 540px; }
figure img { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 0.85em; margin-top: 6px; }
h2 { font-size: 1.1em; margin: 22px 0 8px; }
table { border-collapse: collapse; margin: 4px 0; font-size: 0.88em; background: #fff;
        width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 10px; vertical-align: top; }
th { background: var(--head); text-align: left; font-weight: 600; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:hover { background: #f6f9fd; }
p.note { color: var(--muted); font-size: 0.83em; margin: 4px 0 14px; }
details { background: #fff; border: 1px solid var(--line); border-radius: 6px;
          margin: 12px 0; padding: 0 16px; }
details[open] { padding-bottom: 12px; }
summary { cursor: pointer; padding: 10px 0; font-weight: 600; }
summary .count { color: var(--muted); font-weight: 400; }
ul.flagged li { margin: 6px 0; }
ul.flagged .reason { color: var(--warn); }
.scroll { overflow-x: auto; }
@media print { details { border: none; } details > * { display: block; } header { color: #000;
               background: none; } }
""".strip()


def to_html(report: Report) -> str:
    """The report as one self-contained HTML page (see the module's docstring)."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{e(report.title)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<header><h1>{e(report.title)}</h1>"
           f"<p>{len(report.tables)} detail tables, {len(report.figures)} figures</p></header>",
           "<main>"]
    if report.summary:
        out.append('<section class="summary"><ul>'
                   + "".join(f"<li>{e(s)}</li>" for s in report.summary) + "</ul></section>")
    lead = report.lead_figures()
    if lead:
        out.append('<div class="figures lead">' + "".join(
            _html_figure(report, name) for name in lead) + "</div>")
    if report.overview is not None:
        out.append(_html_table(report.overview))
    if report.flagged:
        items = "".join(f'<li><span class="reason">{e(reason)}</span>: {e(", ".join(runs))}'
                        "</li>" for reason, runs in report.flagged)
        out.append(_fold("Flagged predictions", f"{len(report.flagged)} reason(s)",
                         f'<ul class="flagged">{items}</ul>'))
    if report.notes:
        out.append(_fold("Notes per configuration", f"{len(report.notes)}",
                         "<ul>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>"))
    if report.tables:
        out.append(_fold("Detail", f"{len(report.tables)} tables",
                         "".join(_html_table(t) for t in report.tables)))
    others = report.other_figures()
    if others:
        out.append(_fold("More figures", f"{len(others)}", '<div class="figures">' + "".join(
            _html_figure(report, name) for name in others) + "</div>"))
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"


def _fold(title: str, count: str, body: str) -> str:
    return (f'<details><summary>{html.escape(title)} <span class="count">'
            f"({html.escape(count)})</span></summary>{body}</details>")


def _html_figure(report: Report, name: str) -> str:
    """A figure at its own width (no wider: a small plot stretched reads badly), shrinking
    with the window."""
    title = report.figure_titles.get(name, name)
    png = report.figures[name]
    data = base64.b64encode(png).decode("ascii")
    e = html.escape
    width = png_width(png)
    # a figure drawn wide (many configurations, its legend beside it) takes a row of its own
    row = "flex-basis: 100%; " if width > WIDE_PX else ""
    return (f'<figure style="{row}max-width: {width + 22}px"><img alt="{e(title)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{e(title)}</figcaption></figure>')


WIDE_PX = 1000


def png_width(png: bytes) -> int:
    """A PNG's width in pixels (its IHDR chunk, right after the signature)."""
    return int.from_bytes(png[16:20], "big")


def _html_table(t: Table) -> str:
    e = html.escape
    out = [f'<h2 id="{e(t.key)}">{e(t.title)}</h2>']
    if not t.rows:
        out.append("<p>(no runs)</p>")
    else:
        head = "".join(f"<th>{e(c)}</th>" for c in t.columns)
        cell = ["<td>" if t.is_text(i) else '<td class="num">' for i in range(len(t.columns))]
        body = "".join("<tr>" + "".join(f"{cell[i]}{e(str(c))}</td>" for i, c in enumerate(row))
                       + "</tr>" for row in t.rows)
        out.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
                   f"<tbody>{body}</tbody></table></div>")
    if t.note:
        out.append(f'<p class="note">{e(t.note)}</p>')
    return "".join(out)
