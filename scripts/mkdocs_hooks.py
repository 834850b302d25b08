"""MkDocs hooks of the documentation site (mkdocs.yml names this file).

The pages are written to read on a forge as well as on the site, so a few link to files of the
checkout outside docs/ (the README, the example site configs). The site holds only docs/, so
such a link would lead nowhere there: where its target exists in the checkout it becomes the
link text followed by the file's path in the checkout; a target that does not exist is left as
it is, so the strict build still fails on it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")


def outside_link(text: str, target: str, page_dir: Path, docs_dir: Path) -> str | None:
    """The replacement of a link to a checkout file outside ``docs_dir``; None to keep it."""
    if re.match(r"[a-z]+:", target) or target.startswith("#"):
        return None
    path_part = target.partition("#")[0]
    dest = (page_dir / path_part).resolve()
    if dest.is_relative_to(docs_dir) or not dest.is_relative_to(ROOT) or not dest.exists():
        return None
    return f"{text} (`{dest.relative_to(ROOT)}` in the orch checkout)"


def rewrite(markdown: str, page_dir: Path, docs_dir: Path) -> str:
    """``markdown`` with its links out of ``docs_dir`` rewritten; code blocks left alone."""
    def one(match: re.Match) -> str:
        new = outside_link(match[1], match[2], page_dir, docs_dir)
        return match[0] if new is None else new

    out, last = [], 0
    for fence in FENCE.finditer(markdown):
        out += [LINK.sub(one, markdown[last:fence.start()]), fence[0]]
        last = fence.end()
    out.append(LINK.sub(one, markdown[last:]))
    return "".join(out)


def on_page_markdown(markdown, page, config, files):  # MkDocs' hook signature
    docs_dir = Path(config["docs_dir"]).resolve()
    page_dir = (docs_dir / page.file.src_uri).parent
    return rewrite(markdown, page_dir, docs_dir)
