"""The installed package says what it is: what `pip show -v qkdyn` prints (licence, authors, project URLs).

The URLs are the public works qkdyn is about (the two papers, paper A's authors' code); qkdyn has no
public address of its own, so no entry may claim to be its home page or source.
"""
import importlib.metadata
import subprocess
import sys

import pytest
from repo_paths import ROOT

#: label -> address, as pyproject.toml's [project.urls] writes them (and the README cites them)
URLS = {
    "Paper A (arXiv 2608.06776)": "https://arxiv.org/abs/2608.06776",
    "Paper A authors' notebooks":
        "https://github.com/vashishtrahul/Faster-Query-Key-Learning-Sharpens-Attention-in-Self-Attention-Models",
    "Paper B (arXiv 2604.01683v1)": "https://arxiv.org/abs/2604.01683v1",
}


def _project_urls(meta) -> dict[str, str]:
    return dict(entry.split(", ", 1) for entry in meta.get_all("Project-URL") or [])


def test_installed_metadata_names_licence_authors_and_the_works_it_is_about():
    meta = importlib.metadata.metadata("qkdyn")
    # PEP 639: an SPDX expression and the licence file itself (no licence classifier beside them)
    assert meta["License-Expression"] == "MIT" and "LICENSE" in (meta.get_all("License-File") or [])
    assert meta["Author"]
    assert not any(c.startswith("License ::") for c in meta.get_all("Classifier"))
    urls = _project_urls(meta)
    assert urls == URLS, f"installed Project-URLs {urls} (reinstall after editing pyproject.toml?)"
    # core metadata limits a label to 32 characters; no label may pose as qkdyn's own address
    assert all(len(label) <= 32 for label in urls)
    assert not {label.lower() for label in urls} & {"homepage", "home", "source", "repository", "issues"}


def test_pip_show_prints_them():
    pytest.importorskip("pip")
    out = subprocess.run([sys.executable, "-m", "pip", "show", "-v", "qkdyn"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "License-Expression: MIT" in out
    assert "Author: " in out and "Author: \n" not in out
    for label, url in URLS.items():
        assert f"{label}, {url}" in out


def test_the_readme_cites_the_same_addresses():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(url in readme for url in URLS.values())
