"""mkdocs hook: lay out the installed package ``qkdyn`` as one folder tree for mkdocstrings.

``pyproject.toml`` installs ``theory/``, ``simulate/`` and ``empirical/`` as ``qkdyn.theory``,
``qkdyn.simulate`` and ``qkdyn.empirical`` (a package-dir mapping), which griffe's static analysis
cannot follow. Before the build, ``build/api-tree/qkdyn`` is made of links: ``qkdyn/``'s files plus
those three folders under their installed names; ``mkdocs.yml`` points mkdocstrings there.
"""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "api-tree" / "qkdyn"
MAPPED = ("theory", "simulate", "empirical")


def on_config(config, **kwargs):
    if TREE.exists():
        shutil.rmtree(TREE)
    TREE.mkdir(parents=True)
    for item in (ROOT / "qkdyn").iterdir():
        if item.name != "__pycache__":
            (TREE / item.name).symlink_to(item)
    for name in MAPPED:
        (TREE / name).symlink_to(ROOT / name)
    return config
