"""The hand-checked brown-sva sample: its rates, its subsets, the fixture's consistency and the draw."""
import json

import pytest
from qkdyn.empirical.circuits import handcheck as H
from qkdyn.empirical.data import brown
from repo_paths import ROOT

from qkdyn.errors import InputError

HEADER = "uid\tverb\tsubject\tcorrect\tnote\tsample\ttagged_sentence"
SINGULAR = "The/at author/nn of/in the/at books/nns writes/vbz ./."  # attractor 'books' between 1 and 5
ADJACENT = "The/at dog/nn barks/vbz ./."


def _tsv(*rows):
    return "\n".join([HEADER, *("\t".join(map(str, r)) for r in rows)]) + "\n"


def test_wilson_bounds_solve_the_score_equation():
    """Both bounds p satisfy (k/n - p)^2 = z^2 p (1 - p) / n (z the 97.5% normal quantile), the point
    estimate lies between them, and k = 0 gives a lower bound of 0 and an upper bound of z^2 / (n + z^2)."""
    z = 1.959963984540054
    for k, n in ((8, 120), (10, 64), (1, 3), (17, 17)):
        lo, hi = H.wilson_interval(k, n)
        assert lo <= k / n <= hi
        for p in (lo, hi):
            assert (k / n - p) ** 2 == pytest.approx(z * z * p * (1 - p) / n, abs=1e-12)
    assert H.wilson_interval(0, 10) == pytest.approx((0.0, z * z / (10 + z * z)))
    wide, narrow = H.wilson_interval(5, 50), H.wilson_interval(50, 500)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]


@pytest.mark.parametrize("k, n", [(0, 0), (3, 2), (-1, 4)])
def test_wilson_refuses_impossible_counts(k, n):
    with pytest.raises(InputError, match="0 <= k <= n"):
        H.wilson_interval(k, n)


def test_attractor_is_a_noun_of_the_other_number_between_subject_and_verb():
    tags = [t for _, t in brown.parse_tagged(SINGULAR)]
    assert H.has_attractor(tags, 1, 5)
    assert not H.has_attractor(tags, 4, 5)  # nothing between
    assert not H.has_attractor(["at", "nn", "in", "at", "nn-tl", "vbz"], 1, 5)  # same number
    assert H.has_attractor(["nns", "in", "pps", "ber"], 0, 3)  # a subject pronoun counts
    assert not H.has_attractor(["nns", "in", "nns", "ber", "nn"], 0, 3)  # after the verb does not


def test_summary_counts_by_draw_and_subset():
    """Overall: the uniform draws only; subsets: every draw (the non-adjacent draw's wrong item counts there)."""
    items = H.parse_rows(_tsv(
        ("a:0:5", 5, 1, "yes", "", "uniform", SINGULAR),  # attractor, right
        ("a:1:2", 2, 1, "no", "why", "seed-2026", ADJACENT),  # adjacent, wrong
        ("a:2:2", 2, 1, "yes", "", "uniform", ADJACENT),
        ("a:3:5", 5, 1, "no", "why", "non-adjacent", SINGULAR),  # attractor, wrong, not in the overall rate
    ))
    assert [(i.adjacent, i.attractor) for i in items] == [(False, True), (True, False), (True, False), (False, True)]
    summary = H.error_summary(items)
    assert (summary["overall"]["wrong"], summary["overall"]["n"]) == (1, 3)
    assert summary["overall"]["interval"] == H.wilson_interval(1, 3)
    assert (summary["adjacent"]["wrong"], summary["adjacent"]["n"]) == (1, 2)
    assert (summary["non-adjacent"]["wrong"], summary["non-adjacent"]["n"]) == (1, 2)
    assert summary["attractor"]["rate"] == 0.5
    line = H.summary_line(items)
    assert "on 4 items" in line and "1/3 = 33.3%" in line and "non-adjacent 1/2 = 50.0%" in line
    lo, hi = H.wilson_interval(1, 3)
    assert f"{100 * lo:.1f}-{100 * hi:.1f}%" in line
    assert H.error_rate([])["rate"] is None and "no items" in H.summary_line(items[1:3])


@pytest.mark.parametrize("text, match", [
    ("uid\tverb\tsubject\n", "missing column"),
    (_tsv(("a:0:2", 2, 1, "yes", "", "uniform")), "fields"),
    (_tsv(("a:0:2", "two", 1, "yes", "", "uniform", ADJACENT)), "word positions"),
    (_tsv(("a:0:2", 2, 1, "maybe", "", "uniform", ADJACENT)), "correct yes/no"),
    (_tsv(("a:0:2", 9, 1, "yes", "", "uniform", ADJACENT)), "subject < verb"),
])
def test_malformed_rows_are_input_errors(text, match):
    with pytest.raises(InputError, match=match):
        H.parse_rows(text)


def test_unknown_draw_is_an_input_error():
    with pytest.raises(InputError, match="unknown sample"):
        H.error_summary(H.parse_rows(_tsv(("a:0:2", 2, 1, "yes", "", "guess", ADJACENT))))


def _fixture_rows():
    header, *lines = (ROOT / "empirical" / "circuits" / H.HANDCHECK).read_text().splitlines()
    return [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]


def test_committed_sample_is_consistent():
    """Every row: the heuristic's item for its verb, a judgement whose true head agrees with it, a reason
    where it is wrong, the recorded subset columns equal to the tag rule, and the draws' sizes."""
    rows, items = _fixture_rows(), H.package_rows()
    assert len({r["uid"] for r in rows}) == len(rows)
    for row, item in zip(rows, items, strict=True):
        derived = {i["verb"]: i["subject"] for i in brown.derive_items(brown.parse_tagged(row["tagged_sentence"]))}
        assert derived[item.verb] == item.subject, row["uid"]
        assert item.correct == (row["true_subject"] == row["subject"]), row["uid"]
        assert item.correct or row["note"], row["uid"]
        assert (row["adjacent"], row["attractor"]) == (("no", "yes")[item.adjacent], ("no", "yes")[item.attractor])
        assert row["checked_by"]
    sizes = {s: sum(i.sample == s for i in items) for s in (*H.UNIFORM_SAMPLES, H.NON_ADJACENT_SAMPLE)}
    assert sizes == {"seed-2026": 30, "uniform": H.DRAW_SIZES[0], "non-adjacent": H.DRAW_SIZES[1]}
    assert not any(i.adjacent for i in items if i.sample == H.NON_ADJACENT_SAMPLE)
    assert H.error_summary(items)["overall"]["n"] >= 120


def test_draw_is_seeded_disjoint_and_takes_only_visible_test_items():
    test_docs = [d for d in (f"c{a}{n:02d}" for a in "abc" for n in range(30)) if brown.split_of(d) == "test"]
    other_doc = next(d for d in (f"cd{n:02d}" for n in range(30)) if brown.split_of(d) != "test")
    items = [{"doc": doc, "uid": f"{doc}:{n}:{v}", "prefix": ["w"] * v, "subject": v - 1 - n % 2 if v == 3 else 0, "verb": v,
              "label": 0, "verb_word": "is"} for doc in test_docs for n in range(10) for v in (3, 40)]
    items.append({**items[0], "doc": other_doc, "uid": "other"})
    exclude = {items[2]["uid"]}
    draw = H.draw_sample(items, exclude, max_len=32, seed=7, n_uniform=5, n_non_adjacent=4)
    assert draw == H.draw_sample(items, exclude, max_len=32, seed=7, n_uniform=5, n_non_adjacent=4)
    assert draw != H.draw_sample(items, exclude, max_len=32, seed=8, n_uniform=5, n_non_adjacent=4)
    by_uid = {i["uid"]: i for i in items}
    assert len(draw) == 9 and list(draw.values()).count("uniform") == 5
    assert "other" not in draw and items[2]["uid"] not in draw
    assert all(by_uid[u]["verb"] == 3 for u in draw)  # subject outside a 32-token window: never drawn
    assert all(by_uid[u]["subject"] != by_uid[u]["verb"] - 1 for u, s in draw.items() if s == H.NON_ADJACENT_SAMPLE)


def test_redrawing_from_the_prepared_corpus_gives_the_committed_sample():
    """Where `qkdyn data fetch brown` has run: the rule in BROWN_SVA.md reproduces the committed uids."""
    from qkdyn.empirical.circuits.presets import PRESETS
    from qkdyn.empirical.data.fetch import cache_dir, is_cached

    if not is_cached("brown"):
        pytest.skip("the Brown corpus is not fetched (qkdyn data fetch brown)")
    lines = (cache_dir() / "brown" / "items.jsonl").read_text().splitlines()
    items = H.package_rows()
    first = {i.uid for i in items if i.sample == "seed-2026"}
    draw = H.draw_sample([json.loads(line) for line in lines], first, PRESETS["cpu-brown-sva"]["max_len"],
                         H.DRAW_SEED, *H.DRAW_SIZES)
    assert draw == {i.uid: i.sample for i in items if i.uid not in first}
