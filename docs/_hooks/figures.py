"""mkdocs hook: the committed figures (``figures/**/*.png``) travel with the site, under ``figures/``.

``docs/gallery.md`` shows them by their paths in the repository, ``../figures/NAME.png`` (so the page
reads the same on GitHub, and tests/project/test_docs.py finds every link inside the repository).
The site builds that page as ``gallery/index.html``, from where the same relative path is the site's
``figures/NAME.png``: this hook adds each PNG there as a file of the site (copied by mkdocs, served
by ``mkdocs serve``).
"""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]


def on_files(files, config, **kwargs):
    for png in sorted((ROOT / "figures").rglob("*.png")):
        files.append(File(png.relative_to(ROOT).as_posix(), str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
