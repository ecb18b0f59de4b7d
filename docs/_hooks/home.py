"""mkdocs hook: the site's home page is the repository's README (what qkdyn is, the install, the quick
start, the theory, the verdict table), then docs/README.md (the pages and the commands at a glance).

One source for both: the README is what a visitor of the repository reads first, and the same text,
its quick start included, opens the site. Its links are written from the repository root; on the
home page (built from docs/README.md) a link into ``docs/`` becomes the page's own name and any other
repository path gets the ``../`` that docs pages use for files beside docs/ (tests/project/test_docs.py
checks those resolve). The README's own list of the documentation is left out: the site's navigation
and the page list after it say the same.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: a Markdown link's target written from the repository root: ](path) with no scheme and no anchor first
LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")


def relink(text: str) -> str:
    """``text`` (Markdown written at the repository root) with its links as seen from ``docs/``."""

    def target(match: re.Match) -> str:
        path = match[1]
        return f"]({path[len('docs/'):]})" if path.startswith("docs/") else f"](../{path})"

    return LINK.sub(target, text)


def home_markdown(readme: str, pages: str) -> str:
    """The home page: ``readme`` without its "## Documentation" section, relinked, then ``pages``
    (docs/README.md) with its title as a second-level heading."""
    head, sep, rest = readme.partition("\n## Documentation\n")
    if sep:
        later = rest.find("\n## ")
        head += rest[later:] if later >= 0 else "\n"
    title, _, body = pages.partition("\n")
    return relink(head).rstrip() + "\n\n" + "#" + title.lstrip() + "\n" + body


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    if not page.is_homepage:
        return markdown
    return home_markdown((ROOT / "README.md").read_text(encoding="utf-8"), markdown)
