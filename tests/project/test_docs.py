"""The docs travel with the repository: links resolve inside it, and the CLI reference is current."""
import re

from repo_paths import ROOT

from qkdyn.cli import reference

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_cli_reference_is_current():
    assert (ROOT / "docs" / "cli.md").read_text() == reference(), (
        "docs/cli.md is stale: regenerate it with "
        "python -c \"from qkdyn.cli import reference; print(reference(), end='')\" > docs/cli.md")


def test_readme_and_docs_link_only_to_files_inside_the_repository():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        assert "../shared" not in text, page
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://")):
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{page.name} links to {target}"


def test_modules_cite_docs_setting_md_by_sections_it_has():
    """Users never see the design card: modules and help texts cite docs/setting.md, by its numbered sections."""
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "setting.md").read_text(), flags=re.M))
    cited = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        if ".venv" in path.parts:
            continue
        text = path.read_text()
        assert "DESIGN" + ".md" not in text and "DESIGN" + " init" not in text, f"{path.relative_to(ROOT)} cites the design card"
        for group in re.findall(r"docs/setting\.md (?:section|sections|sec\.) ([\d, and]+)", text):
            cited += [(path.name, number) for number in re.findall(r"\d+", group)]
    assert cited and all(number in sections for _, number in cited), (sorted(sections), cited)


#: the committed reports the docs point to for measured numbers (docs/*.md state no measured number by hand)
REPORTS = ("figures/report.md", "figures/coupled/report.md", "figures/circuits/report.md")
CLAIM_POINTER = re.compile(r"report's ([A-Z][A-Za-z0-9-]*) (?:entry|summary|table|sections?|parts?)\b")


def test_docs_point_to_claims_the_committed_reports_have():
    """A pointer such as "the report's SUB summary" names a claim with a section in a committed report,
    so a renamed or dropped claim cannot leave the docs pointing at nothing."""
    claims = set()
    for report in REPORTS:
        claims |= set(re.findall(r"^## ([^:\n]+): [A-Z]+", (ROOT / report).read_text(), flags=re.M))
    cited = [(page.name, claim) for page in sorted((ROOT / "docs").glob("*.md"))
             for claim in CLAIM_POINTER.findall(page.read_text())]
    assert cited, "no pointer found: the pattern no longer matches how the docs cite the reports"
    missing = [(name, claim) for name, claim in cited if claim not in claims]
    assert not missing, f"docs point to claims no committed report has: {missing}"
