"""The report reads as a person would write it: nothing cut off, shared facts once, long lists as tables."""
import json

from repo_paths import GOLDEN

from qkdyn.claims import Claim
from qkdyn.report import _LAW_FIXES, claims_markdown, human


def comparison(effect, p, verdict="holds"):
    return {"claimed": "increase", "effect": effect, "spread": 0.01, "n": 3, "interval": [effect - 0.02, effect + 0.02],
            "test": "paired t-test", "p_value": p, "verdict": verdict}


def claims():
    deep = {"CACO": {"ov": {"fit": {"a": 1.0, "rel_rms": 2.5e-6}}, "growth": "(log t)^1 * log log t"}}
    many = {f"part {i}": comparison(0.1 * i, 1e-3) for i in range(6)}
    return [
        Claim("A3", "ov ~ log^1 t", "partial", {"per_param": deep, "seconds": {"gd": 24.9, "sampled": 135.3}},
              "qk grows like 1 log log t", [], parts={"ov ~ log^1 t": "holds", "qk ~ log^2 t": "fails"}),
        Claim("S", "sampled", "holds", {"seconds": {"gd": 24.9, "sampled": 135.3}, "seeds": list(range(12))}, "x",
              [], parts={name: "holds" for name in many}, stats=many),
    ]


def test_laws_are_written_as_a_person_would():
    assert human("ov ~ log^1 t, (log t)^1 * log log t, 1 log log t, 21 log log t, (log t)^12") == \
        "ov ~ log t, log t * log log t, log log t, 21 log log t, (log t)^12"


def test_the_claims_themselves_write_laws_as_a_person_would():
    """At the source, not only in report.md: the quick verify's claims (the golden file, which
    tests/qkdyn/test_verify.py proves the current code reproduces) go into report.json and the CLI
    (`qkdyn report` prints summaries) as they are; no part name or summary may read "log^1 t"."""
    from qkdyn.simulate.claims_theory import PAPER_LAWS
    from qkdyn.simulate.growth import Law

    assert PAPER_LAWS == {"ov": "log t", "qk": "(log t)^2", "exp(qk)": "(log t)^2", "odds": "(log t)^2"}
    assert [str(Law.log_power(p)) for p in (1, 2, 1.5)] == ["log t", "(log t)^2", "(log t)^1.5"]
    golden = json.loads((GOLDEN / "verify_quick_claims.json").read_text())["claims"]
    a3 = next(c for c in golden if c["id"] == "A3")
    assert "ov ~ log t" in a3["parts"] and "ov ~ log t:" in a3["summary"]
    texts = [(c["id"], text) for c in golden for text in (c["statement"] if "statement" in c else "", c["summary"],
                                                           *c["parts"])]
    assert [(claim, pattern.pattern) for claim, text in texts for pattern, _ in _LAW_FIXES if pattern.search(text)] == []


def test_nothing_is_cut_off_shared_facts_appear_once_and_long_lists_are_tables():
    text = "\n".join(claims_markdown(claims()))
    assert "{...}" not in text and ", ..." not in text
    assert "- `rel_rms`: 2.5e-06" in text and "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]" in text
    assert "log^1" not in text and "(log t)^1" not in text and "log t * log log t" in text
    assert text.count("135.3") == 1 and "- `seconds` (claims A3, S):" in text
    assert "| part | verdict |" in text and "| comparison | claimed | effect |" in text
    assert "6 comparisons: 6 holds ([table](#s-holds))" in text
    assert "## S: HOLDS" in text
