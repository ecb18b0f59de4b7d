"""mkdocs hook: lay out the installed package ``qkdyn`` as one folder tree for mkdocstrings.

``pyproject.toml`` installs ``theory/``, ``simulate/`` and ``empirical/`` as ``qkdyn.theory``,
``qkdyn.simulate`` and ``qkdyn.empirical`` (a package-dir mapping), which griffe's static analysis
cannot follow. Before the build, ``build/api-tree/qkdyn`` is made as a copy: ``qkdyn/``'s files plus
those three folders under their installed names; ``mkdocs.yml`` points mkdocstrings there. (A copy,
not links: griffe resolves a link to its target and then finds the repository's own ``qkdyn/``,
which lacks the mapped folders, ahead of the tree.)
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "api-tree" / "qkdyn"
MAPPED = ("theory", "simulate", "empirical")


def build_tree() -> None:
    """Copy into a private folder beside the tree, then swap it in by renames, so a reader (griffe, mypy) or
    another build running at the same time (two test workers) never sees a half-deleted or half-copied tree."""
    skip = shutil.ignore_patterns("__pycache__")
    fresh = TREE.parent / f".qkdyn-{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(ROOT / "qkdyn", fresh, ignore=skip)
    for name in MAPPED:
        shutil.copytree(ROOT / name, fresh / name, ignore=skip)
    old = TREE.parent / f".qkdyn-old-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.rename(TREE, old)
    os.rename(fresh, TREE)
    shutil.rmtree(old, ignore_errors=True)


# built when mkdocs loads this hook, before mkdocstrings resolves its search paths (a path missing
# then is dropped for the whole build), and again per config so a rebuild sees current sources
build_tree()


def on_config(config, **kwargs):
    build_tree()
    return config
