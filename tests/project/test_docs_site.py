"""The docs site builds offline with warnings as errors, its API reference is generated from the docstrings
with their Sphinx roles as links, its formulas typeset by the KaTeX it carries (nothing is loaded from the
network), its home page is the README's quick start, and its gallery shows the figures."""
import html
import importlib.util
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
    for target in ("qkdyn.simulate.trajectory.Trajectory", "qkdyn.verify.verify", "qkdyn.testing"):
        assert re.search(rf'<a class="autorefs autorefs-internal"[^>]*href="#{re.escape(target)}"', reference), target


@pytest.mark.xdist_group("api-tree")
def test_the_public_verbs_have_numpy_parameter_tables(site):
    reference = (site / "reference" / "index.html").read_text()
    for anchor, parameters in [("qkdyn.simulate.solve.solve", ("t_max", "until_loss", "record_losses")),
                               ("qkdyn.theory.derived.derive", ("param",)),
                               ("qkdyn.simulate.trajectory.Trajectory.at", ("t",)),
                               ("qkdyn.simulate.trajectory.Trajectory.plot", ("quantities", "axes", "label")),
                               ("qkdyn.theory.setting.Setting", ("classes", "eta_qk", "attn0")),
                               ("qkdyn.theory.spec.Spec", ("qk", "ov", "loss", "token_weights")),
                               ("qkdyn.theory.spec.CircuitSpec", ("form", "depth", "inner", "coupling")),
                               ("qkdyn.theory.spec.load", ("path",)),
                               ("qkdyn.empirical.synthetic.experiment.gd", ("setting", "param", "step", "at")),
                               ("qkdyn.empirical.synthetic.experiment.sgd", ("batch", "seed", "optimizer")),
                               ("qkdyn.verify.verify", ("quick", "budget", "runs_dir", "executor", "studies"))]:
        start = reference.index(f'id="{anchor}"')
        section = reference[start:reference.index('class="doc doc-heading"', start + 50)]
        assert "Parameters:" in section, anchor
        for name in parameters:
            assert re.search(rf"<code>{name}</code>\s*</td>", section), (anchor, name)
    for anchor in ("qkdyn.theory.spec.load", "qkdyn.empirical.synthetic.experiment.gd", "qkdyn.verify.verify"):
        start = reference.index(f'id="{anchor}"')
        assert "Returns:" in reference[start:reference.index('class="doc doc-heading"', start + 50)], anchor


@pytest.mark.xdist_group("api-tree")
def test_formulas_are_marked_and_typeset_by_the_sites_own_katex(site):
    api = (site / "api" / "index.html").read_text()
    assert re.search(r'<div class="arithmatex">\\\[.*x\(t\) = \\sum', api, flags=re.S)
    assert '<span class="arithmatex">\\(\\tau = \\log(1 + t)\\)</span>' in api
    for asset in ("assets/katex/katex.min.js", "assets/math.js", "assets/katex/katex.min.css"):
        assert f'"../{asset}"' in api and (site / asset).is_file(), asset
    fonts = re.findall(r"url\((fonts/[^)]+\.woff2)\)", (site / "assets/katex/katex.min.css").read_text())
    assert fonts and all((site / "assets/katex" / font).is_file() for font in fonts)


@pytest.mark.xdist_group("api-tree")
def test_no_page_loads_anything_from_the_network(site):
    """Scripts, styles, fonts and images come with the site: it reads the same without a network."""
    remote = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"')
    loads = {str(page.relative_to(site)): remote.findall(page.read_text()) for page in site.rglob("*.html")}
    assert not {page: found for page, found in loads.items() if found}


@pytest.mark.xdist_group("api-tree")
def test_every_formula_of_the_site_typesets_with_katex(site):
    """Each formula through the committed KaTeX, errors raised (node runs it; the browser does the same)."""
    import json
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    formulas = [html.unescape(match[2]).strip() for page in sorted(site.rglob("*.html"))
                for match in re.finditer(r'<(span|div) class="arithmatex">(.*?)</\1>', page.read_text(), flags=re.S)]
    script = ("const katex = require(process.argv[1]); const bad = [];"
              "for (const tex of JSON.parse(require('fs').readFileSync(0, 'utf8'))) {"
              "  try { katex.renderToString(tex.slice(2, -2), {displayMode: tex.startsWith('\\\\['), throwOnError: true}); }"
              "  catch (error) { bad.push([tex, error.message]); } }"
              "console.log(JSON.stringify(bad));")
    out = subprocess.run([node, "-e", script, str(ROOT / "docs/assets/katex/katex.min.js")], input=json.dumps(formulas),
                         capture_output=True, text=True, timeout=120, check=True)
    assert len(formulas) > 20 and json.loads(out.stdout) == []


def test_the_committed_katex_files_are_the_pinned_package_s():
    """docs/assets/katex holds what `make docs-katex` unpacked from the npm package whose sha256 the
    Makefile pins; SHA256SUMS (written then) names that package and every file's sha256."""
    import hashlib

    folder = ROOT / "docs" / "assets" / "katex"
    head, *lines = (folder / "SHA256SUMS").read_text().splitlines()
    makefile = (ROOT / "Makefile").read_text()
    version = re.search(r"^KATEX_VERSION\s*:=\s*(\S+)", makefile, flags=re.M)[1]
    package = re.search(r"^KATEX_SHA256\s*:=\s*(\S+)", makefile, flags=re.M)[1]
    assert head == f"# katex@{version} from npm, package sha256 {package}"
    sums = dict(reversed(line.split("  ", 1)) for line in lines)
    on_disk = {path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()} - {"SHA256SUMS"}
    assert set(sums) == on_disk and {"katex.min.js", "katex.min.css", "LICENSE"} <= on_disk
    for name, digest in sums.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.xdist_group("api-tree")
def test_the_home_page_is_the_readme_with_its_quick_start(site):
    """The site opens with what the README opens with: the install and the quick start, code intact."""
    home = html.unescape(re.sub(r"<[^>]+>", "", (site / "index.html").read_text()))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", quick, flags=re.S | re.M)
    assert len(blocks) >= 2 and all(block in home for block in blocks)
    assert "pip install ." in home and "qkdyn warm" in home and "Quick start: verify a theorem, draw a plot" in home
    assert "Commands at a glance" in home  # docs/README.md follows


@pytest.mark.xdist_group("api-tree")
def test_the_gallery_shows_every_committed_figure_from_the_site(site):
    gallery = site / "gallery" / "index.html"
    sources = re.findall(r'<img alt="[^"]*" src="([^"]+)"', gallery.read_text())
    committed = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "figures").rglob("*.png"))
    assert sorted((gallery.parent / src).resolve().relative_to(site.resolve()).as_posix() for src in sources) == committed
    assert all((gallery.parent / src).resolve().is_file() for src in sources)


def test_the_home_page_hook_relinks_the_readme_from_docs():
    spec = importlib.util.spec_from_file_location("home", ROOT / "docs" / "_hooks" / "home.py")
    home = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(home)
    readme = ("# qkdyn\n\nSee [the setting](docs/setting.md#notation), [report](figures/report.md), "
              "[paper](https://arxiv.org/abs/1), [below](#verdicts).\n\n## Documentation\n\n- [api](docs/api.md)\n\n"
              "## Later\n\ntext\n")
    page = home.home_markdown(readme, "# qkdyn documentation\n\n- [cli](cli.md)\n")
    assert page == ("# qkdyn\n\nSee [the setting](setting.md#notation), [report](../figures/report.md), "
                    "[paper](https://arxiv.org/abs/1), [below](#verdicts).\n\n## Later\n\ntext\n\n"
                    "## qkdyn documentation\n\n- [cli](cli.md)\n")
