"""The docs site builds offline with warnings as errors, its API reference is generated from the docstrings
with their Sphinx roles as links, its formulas are marked for MathJax, and its gallery shows the figures."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT

#: a Sphinx role or a reST literal-block marker left as text (what Markdown would show literally)
SPHINX_LEFTOVER = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj):|\S::\s*</p>")
#: the proxies of a machine without network: any fetch during the build fails (refused at once)
OFFLINE = {name: "http://127.0.0.1:9" for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("docs") / "site"
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, **OFFLINE, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    return site


def _without_code_blocks(html: str) -> str:
    return re.sub(r"<pre.*?</pre>", "", html, flags=re.S)


@pytest.mark.xdist_group("api-tree")  # both build build/api-tree: one worker runs them in turn
def test_the_docs_site_builds_strictly_with_a_generated_api_reference(site):
    reference = (site / "reference" / "index.html").read_text()
    for name in ("assert_grows_like", "for_each_param", "to_xarray", "to_pandas", "layout_problems", "Setting"):
        assert name in reference, name


@pytest.mark.xdist_group("api-tree")
def test_no_page_shows_sphinx_markup_and_roles_are_links(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    left = {str(page.relative_to(site)): SPHINX_LEFTOVER.findall(_without_code_blocks(page.read_text()))
            for page in pages}
    assert not {page: found for page, found in left.items() if found}
    reference = (site / "reference" / "index.html").read_text()
    # roles written :class:`Trajectory`, :func:`~qkdyn.verify.verify` and :mod:`qkdyn.testing` are links now
    for target in ("qkdyn.simulate.solve.Trajectory", "qkdyn.verify.verify", "qkdyn.testing"):
        assert re.search(rf'<a class="autorefs autorefs-internal"[^>]*href="#{re.escape(target)}"', reference), target


@pytest.mark.xdist_group("api-tree")
def test_the_public_verbs_have_numpy_parameter_tables(site):
    reference = (site / "reference" / "index.html").read_text()
    for anchor, parameters in [("qkdyn.simulate.solve.solve", ("t_max", "until_loss", "record_losses")),
                               ("qkdyn.theory.derived.derive", ("param",)),
                               ("qkdyn.simulate.solve.Trajectory.at", ("t",)),
                               ("qkdyn.simulate.solve.Trajectory.plot", ("quantities", "axes", "label"))]:
        start = reference.index(f'id="{anchor}"')
        section = reference[start:reference.index('class="doc doc-heading"', start + 50)]
        assert "Parameters:" in section, anchor
        for name in parameters:
            assert re.search(rf"<code>{name}</code>\s*</td>", section), (anchor, name)


@pytest.mark.xdist_group("api-tree")
def test_formulas_are_marked_for_mathjax(site):
    api = (site / "api" / "index.html").read_text()
    assert re.search(r'<div class="arithmatex">\\\[.*x\(t\) = \\sum', api, flags=re.S)
    assert '<span class="arithmatex">\\(\\tau = \\log(1 + t)\\)</span>' in api
    assert re.search(r'<script src="https://cdn\.jsdelivr\.net/npm/mathjax@3/[^"]+"', api)


@pytest.mark.xdist_group("api-tree")
def test_the_gallery_shows_every_committed_figure_from_the_site(site):
    gallery = site / "gallery" / "index.html"
    sources = re.findall(r'<img alt="[^"]*" src="([^"]+)"', gallery.read_text())
    committed = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "figures").rglob("*.png"))
    assert sorted((gallery.parent / src).resolve().relative_to(site.resolve()).as_posix() for src in sources) == committed
    assert all((gallery.parent / src).resolve().is_file() for src in sources)
