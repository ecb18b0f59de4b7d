"""The nulls' evidence in a real run record and in the figures: per-item evidence, the attractor flags from the
corpus's tags, the positional nulls over all items, the recency-ranked ERASER null, and the bar panels."""
import json
import warnings

import numpy as np
import pytest
from circuit_fakes import run_dirs as fake_run_dirs
from qkdyn.empirical.circuits import metrics, report
from qkdyn.empirical.circuits.handcheck import has_attractor
from qkdyn.empirical.circuits.presets import resolve
from qkdyn.empirical.circuits.train import train
from qkdyn.empirical.data import brown
from repo_paths import ROOT

from qkdyn import figures
from qkdyn.stats import sample_summary


def _prepared(tmp_path, tags: bool):
    """items.jsonl from the hand-checked sentences, three documents each, with the prefix's Brown tags or not."""
    rows = (ROOT / "empirical" / "circuits" / "brown_sva_handcheck.tsv").read_text().splitlines()
    column = rows[0].split("\t").index("tagged_sentence")
    lines = []
    for n, row in enumerate(rows[1:] * 3):
        pairs = brown.parse_tagged(row.split("\t")[column])
        for item in brown.derive_items(pairs):
            doc = f"c{'abcdefghijklmnopqr'[n % 18]}{n:02d}"
            assert item["tags"] == [t for _, t in pairs[:item["verb"]]]  # brown.prepare's items carry them
            if not tags:  # as a cache prepared before they did (format 1)
                del item["tags"]
            lines.append(json.dumps({**item, "doc": doc, "uid": f"{doc}:0:{item['verb']}"}))
    out = tmp_path / ("tagged" if tags else "plain")
    out.mkdir()
    (out / "items.jsonl").write_text("\n".join(lines) + "\n")
    return out, {json.loads(x)["uid"]: json.loads(x) for x in lines}


def test_a_brown_sva_record_carries_the_evidence_its_subsets_and_nulls_need(tmp_path):
    data, items = _prepared(tmp_path, tags=True)
    cfg = resolve("brown-sva", "tiny", {"data": str(data), "max_steps": 2})
    test = train(cfg, tmp_path / "run", progress=False).final["test"]
    evidence = test["items"]
    assert len(evidence["uid"]) == test["n"] > 0
    for uid, read, rationale in zip(evidence["uid"], evidence["read"], evidence["rationale"], strict=True):
        item = items[uid]  # the read-out is the <verb> token; the rationale without it is the subject head
        start = max(0, item["verb"] - (cfg.max_len - 1))
        assert read == item["verb"] - start and rationale == [[item["subject"] - start]]
    expected = [has_attractor(items[u]["tags"], items[u]["subject"], items[u]["verb"]) for u in evidence["uid"]]
    assert evidence["flags"] == {"attractor": expected} and any(expected) and not all(expected)
    assert test["positional"] == pytest.approx(metrics.positional_masses(evidence["read"], evidence["rationale"]))
    assert np.mean(evidence["mass"]) == pytest.approx(test["attention_mass_without_readout"])
    assert np.mean(evidence["score"]) == pytest.approx(test["accuracy"])
    assert test["positional"]["uniform"] == pytest.approx(test["uniform_mass_without_readout"])
    assert {"comprehensiveness_recency", "sufficiency_recency", "eraser_recency"} <= set(test)
    views = report.item_views(test)
    adjacent = sum(r[0] == [read - 1] for r, read in zip(evidence["rationale"], evidence["read"], strict=True))
    assert views["n_items@non-adjacent"] == test["n"] - adjacent and views["previous_token@non-adjacent"] == 0
    assert views["n_items@attractor"] == sum(expected)


def test_items_prepared_without_tags_record_no_attractor_flags(tmp_path):
    data, _ = _prepared(tmp_path, tags=False)
    test = train(resolve("brown-sva", "tiny", {"data": str(data), "max_steps": 1}), tmp_path / "run",
                 progress=False).final["test"]
    assert test["items"]["flags"] == {} and "n_items@attractor" not in report.item_views(test)


def test_the_bars_draw_the_nulls_and_the_deciding_subsets_without_overlaps(tmp_path):
    from qkdyn.empirical.circuits import plots


    arms = {"same lr": 0, "QK x10": 1, "all x10": 2}
    keys = ("accuracy", "attention_mass", report.PRIMARY, "uniform_mass_without_readout", "positional.previous_token",
            "positional.best_offset", *(f"{m}@{s}" for s in ("non-adjacent", "attractor")
                                        for m in ("attention_mass", "uniform", "previous_token", "best_offset")))
    summary = {a: {k: sample_summary([0.2 + 0.05 * m, 0.22 + 0.05 * m]) for k in keys} for a, m in arms.items()}
    thresholds = list(np.linspace(0, 1, 11))
    results = {a: [{"test": {"thresholds": thresholds, "ac_curve": list(np.linspace(1, 0, 11)),
                             "dtap_percent": np.full((5, 5), 4.0).tolist()}}] * 2 for a in arms}
    run_dirs = fake_run_dirs(tmp_path, arms, 2, lambda seed: [
        {"step": s, "dev_accuracy": 0.5, f"dev_{report.PRIMARY}": 0.1} for s in (0, 50)])
    out = tmp_path / "figures"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error", figures.FigureLayoutWarning)
        paths = plots.plot_all("brown-sva", results, summary, run_dirs, "accuracy", out)
    assert len(paths) == 4
