"""The README serves two audiences in under 10 KB: its first lines are the two set-up commands, its
verdict table is generated from the committed reports (scripts/readme_verdicts.py), its prose quotes
no result by hand, and its quick start runs."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from repo_paths import ROOT

README = ROOT / "README.md"
FENCE = re.compile(r"^```[^\n]*\n.*?^```[ \t]*$", flags=re.S | re.M)


def _script():
    spec = importlib.util.spec_from_file_location("readme_verdicts", ROOT / "scripts" / "readme_verdicts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_opens_with_the_two_set_up_commands():
    lines = _text().splitlines()
    assert lines[0] == "# qkdyn" and lines[1] == "" and lines[2] == "```", lines[:3]
    commands = [line.split("#")[0].strip() for line in lines[3:5]]
    assert commands == ["make verify", "make test"] and lines[5] == "```", lines[3:6]


def test_the_readme_is_under_10_kb():
    size = len(_text().encode("utf-8"))
    assert size < 10_000, f"README.md is {size} bytes: move material to docs/ (docs/contributing.md says where)"


def test_the_verdict_table_is_what_the_script_writes_from_the_committed_reports():
    script = _script()
    text = _text()
    assert script.rewrite(text, script.block()) == text, (
        "README.md's verdict table differs from the committed reports: run python scripts/readme_verdicts.py")
    assert (ROOT / "figures" / "report.json").is_file()
    for data, shown, _ in script.REPORTS:  # every report read is linked from the table it fills
        if (ROOT / data).is_file():
            assert f"]({shown})" in text and (ROOT / shown).is_file(), shown


def test_the_script_fills_the_block_from_any_report(tmp_path):
    script = _script()
    (tmp_path / "figures").mkdir()
    claims = [{"id": "X1", "verdict": "holds", "statement": "A law holds (in every form) | always."},
              {"id": "t QK x10", "verdict": "holds", "statement": "Raising QK 10x sharpens (t)."},
              {"id": "t QK x30", "verdict": "fails", "statement": "Raising QK 30x sharpens (t)."},
              {"id": "Y2", "verdict": "fails", "statement": "word " * 40}]
    (tmp_path / "figures" / "report.json").write_text(json.dumps({"claims": claims}))
    table = script.block(tmp_path)
    assert "| X1 | holds | A law holds \\| always. |" in table
    assert "| t QK xR (R = 10 / 30) | holds / fails | Raising QK Rx sharpens. |" in table
    assert len(table.splitlines()[-1]) < script.LIMIT + 20 and table.endswith("… |")
    assert "circuits" not in table  # reports that are not there give no table
    text = f"head\n{script.BEGIN}\nold\n{script.END}\ntail\n"
    assert script.rewrite(text, table) == f"head\n{script.BEGIN}\n{table}\n{script.END}\ntail\n"
    with pytest.raises(ValueError):
        script.rewrite("no markers", table)


def test_the_makefile_regenerates_the_table_right_after_qkdyn_verify():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nverify: ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert [line.split()[0] for line in recipe] == ["$(BIN)/qkdyn", "$(BIN)/python"], recipe
    assert recipe[0].split()[1] == "verify" and recipe[1].split()[1] == "scripts/readme_verdicts.py"


def _prose(text: str) -> str:
    """The README without code blocks, code spans, the generated block, comments and link targets."""
    script = _script()
    text = re.sub(re.escape(script.BEGIN) + ".*?" + re.escape(script.END), "", text, flags=re.S)
    text = FENCE.sub("", text)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"arXiv \d{4}\.\d{4,5}(?:v\d+)?", "arXiv", text)  # the papers' identifiers


def test_the_readme_prose_quotes_no_result_numbers():
    """Results live in the reports: a number of more than one digit (or a decimal, a power of ten, a
    percentage) in the README's prose is a hand copy that drifts; the theory's formulas use 1, 2, 4."""
    numbers = re.findall(r"(?<![\w.])\d[\d.,]*(?:e[-+]?\d+)?%?", _prose(_text()))
    long = [n for n in numbers if len(n.rstrip(".,")) > 1]
    assert not long, f"numbers in README prose (link the report instead): {long}"


def test_the_prose_check_sees_a_hand_copied_number():
    assert re.findall(r"(?<![\w.])\d[\d.,]*(?:e[-+]?\d+)?%?",
                      _prose("A1 holds to 7.7e-11 `9.9` [x](a/1.2) arXiv 2608.06776.")) == ["7.7e-11"]


def _quick_start() -> list[str]:
    section = _text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.split("\n", 1)[1].rsplit("```", 1)[0] for block in FENCE.findall(section)
            if block.startswith("```python")]


def test_the_quick_start_runs(tmp_path):
    blocks = _quick_start()
    assert any("assert_grows_like" in code for code in blocks) and any("savefig" in code for code in blocks)
    for i, code in enumerate(blocks):  # each block on its own, as a reader pastes it
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "MPLBACKEND": "Agg"})
        assert out.returncode == 0, f"quick-start block {i + 1}:\n{out.stderr}"
    assert (tmp_path / "attention_at_matched_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
