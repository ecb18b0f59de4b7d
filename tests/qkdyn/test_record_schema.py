"""A run record's evidence is checked against its study's schema of types and ranges (qkdyn.recordschema,
``Study.schema``) before any judge reads it: a record of the right types but impossible values (a recall of 7.3, a
loss of -1, a NaN perplexity where a number is needed) is one InputError naming its file, through ``qkdyn report``
(exit 2, one stderr line, nothing created), and a run whose measure returns one is not recorded. The pilot of the
coupled study reads its runs folder through the same checks. Each study's hand-written valid record passes; the
records of real quick runs pass too (tests/qkdyn/test_verify.py's quick verify judges every one of them)."""
from __future__ import annotations

import copy
import fnmatch
import json
import math
from pathlib import Path

import pytest

from qkdyn.cli import main
from qkdyn.errors import InputError
from qkdyn.recordschema import COUNT, FRACTION, LOSS, Flag, Items, Number, Text, check
from qkdyn.studies import STUDIES, Record, RunSpec, Study, get, judge


def _quick(study: str, run: str) -> RunSpec:
    return next(s for s in get(study).plan("quick") if s.name == run)


def _theory_a45() -> tuple[RunSpec, dict]:
    spec = _quick("theory", "a45")
    rhos, levels = spec.params["sweep_rhos"], spec.params["loss_levels"]
    attn = [[0.5 if i else math.nan for i in range(len(rhos))] for _ in levels]  # NaN: a level not reached
    return spec, {"evidence": {"rhos": rhos, "levels": levels, "attn": {"CACO": attn, "FAFO": attn},
                               "ode_cross_check": {"points": 144, "max_abs_attn_difference": 1e-11},
                               "proof_steps": {"CACO": {"alpha (1 - alpha) > 0": True}}}}


def _a6_adam() -> tuple[RunSpec, dict]:
    return _quick("a6", "adam"), {"evidence": [
        {"param": "CACO", "rho": 0.1, "steps": 224, "loss": 0.3, "attn_adam": 0.49, "attn_ode": 0.62, "t_ode": 385.6,
         "recorded_steps": [0, 112, 224], "adam_distance": [3e-6, 0.01, 4e-6], "gd_distance": [3e-6, 3e-6, 3e-6],
         "adam_leaves_at_step": None}], "files": ["a6_adam.png"]}


def _stability() -> tuple[RunSpec, dict]:
    spec = _quick("stability", "sub")
    shapes, rhos = spec.params["shapes"], spec.params["rhos"]
    grid = [[1e-8] * len(rhos) for _ in shapes]
    return spec, {"evidence": {"level": 1e-6, "m": 2, "n": 4, "eps": 1e-8, "shapes": shapes, "rhos": rhos,
                               "eps_x_linear_gain": {"CACO": grid}, "max_growth_rate": {"CACO": grid},
                               "log_gain_at_level": {"CACO": grid},
                               "validation": [{"param": "CACO", "K": 2, "D": 1, "N": 2, "rho": 100.0, "sym_dist": 1e-11}]}}


def _sampled() -> tuple[RunSpec, dict]:
    spec = _quick("sampled", "clean")
    return spec, {"evidence": {"generator": "clean", "seeds": list(spec.params["seeds"]), "test_size": 800,
                               "horizon_steps": {"CACO equal": 1000},
                               "runs": [{"form": "CACO", "schedule": "equal", "seed": 0, "horizon": 1000, "steps": 1000,
                                         "loss": 0.12, "at_level": [{"level": 0.3, "attn_distinct": 0.45,
                                                                     "attn_query_id": 0.017, "p_true": 0.76}]}]}}


def _fixed_attention() -> tuple[RunSpec, dict]:
    spec = _quick("fixed-attention", "collapsed")
    p = spec.params
    t = [float(i) for i in range(p["checkpoints"])]
    return spec, {"runs": [{"alpha": alpha, "seed": seed, "t": t, "loss": [1.0] * len(t), "fall": [0.1] * len(t),
                            "attn_distinct": alpha} for alpha in p["alphas"] for seed in p["seeds"]]}


def _run_record(trainer: str, final: dict, details: dict) -> dict:
    """A :class:`qkdyn.runs.RunRecord` as a study's record holds it."""
    return {"trainer": trainer, "config": {"seed": 0, "train": {"seed": 0, "max_steps": 600}}, "steps": 600,
            "parameters": 564930, "train_seconds": {"wall": 57.4, "cpu": math.nan}, "final": final,
            "details": details, "schema": 1}


def _circuits() -> tuple[RunSpec, dict]:
    dev = {"n": 994, "loss": 0.67, "accuracy": 0.76, "macro_f1": 0.76, "attention_mass": 0.12, "uniform_mass": 0.12,
           "ac_curve": [0.0, 0.5, 1.0]}
    return RunSpec.make("circuits", "vader_qk1_s0", seed=0), _run_record(
        "circuits", {"dev": dev, "test": dict(dev)}, {"target_reached": True, "final_train_loss": 0.3, "n_train": 9000,
                                                      "planned_steps": 600})


def _coupled_count() -> tuple[RunSpec, dict]:
    return RunSpec.make("coupled", "count-pydocs-byte-val0.02", kind="count"), {
        "count_model": {"unigram_ppl": 33.7, "bigram_ppl": 15.9, "discount": 0.47, "train_tokens": 10825771,
                        "val_targets": 220934, "vocab": 256}, "data": "pydocs", "tokenizer": "byte"}


def _coupled_lm() -> tuple[RunSpec, dict]:
    evals = [{"kind": "eval", "step": 0, "val_loss": 5.49, "val_ppl": 243.2},
             {"kind": "eval", "step": 150, "val_loss": math.inf, "val_ppl": math.inf}]  # a diverged evaluation
    return RunSpec.make("coupled", "lm-pydocs-tiny-standard-n1-s0-0", kind="train"), _run_record(
        "lm", {"val_loss": 1.6, "val_ppl": 4.95}, {"evals": evals, "train_time_s": 603.5})


def _coupled_mqar() -> tuple[RunSpec, dict]:
    return RunSpec.make("coupled", "mqar-kv4-tiny-standard-n1-s0-0", kind="train"), _run_record(
        "mqar", {"mqar_acc": 0.93}, {"evals": [{"kind": "eval", "step": 100, "mqar_acc": 0.5}]})


#: study -> (a valid record's spec and result, where an impossible value goes, the value, what the error says)
CASES = {
    "theory": (_theory_a45, ("evidence", "attn", "CACO", 1, 2), 1.7,
               "evidence.attn.CACO[1][2] is 1.7, not a number (or NaN) in [0, 1]"),
    "a6": (_a6_adam, ("evidence", 0, "attn_adam"), 7.3, "evidence[0].attn_adam is 7.3, not a number in [0, 1]"),
    "stability": (_stability, ("evidence", "validation", 0, "K"), 2.5, "evidence.validation[0].K is 2.5, not an integer >= 0"),
    "sampled": (_sampled, ("evidence", "runs", 0, "loss"), -1.0, "evidence.runs[0].loss is -1.0, not a number >= 0"),
    "fixed-attention": (_fixed_attention, ("runs", 0, "loss", 1), math.nan, "runs[0].loss[1] is nan, not a number >= 0"),
    "circuits": (_circuits, ("final", "test", "accuracy"), 7.3, "final.test.accuracy is 7.3, not a number in [0, 1]"),
    "coupled-count": (_coupled_count, ("count_model", "bigram_ppl"), math.nan,
                      "count_model.bigram_ppl is nan, not a number >= 1"),
    "coupled-lm": (_coupled_lm, ("final", "val_ppl"), 0.5, "final.val_ppl is 0.5, not a number (or NaN) >= 1"),
    "coupled-mqar": (_coupled_mqar, ("final", "mqar_acc"), 7.3, "final.mqar_acc is 7.3, not a number in [0, 1]"),
}


def _set(data, path: tuple, value):
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _refused(study: Study, spec: RunSpec, result: dict, where: str) -> str:
    with pytest.raises(InputError) as refused:
        study.check_evidence(spec, result, where)
    return str(refused.value)


def test_every_study_with_runs_that_record_evidence_declares_a_schema():
    for name in STUDIES:
        assert get(name).schema, name


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_valid_record_passes_and_an_impossible_value_is_one_line_naming_the_file(case, tmp_path):
    make, path, bad, said = CASES[case]
    spec, result = make()
    study, where = get(spec.study), str(tmp_path / spec.study / f"{spec.name}.json")
    assert any(fnmatch.fnmatchcase(spec.name, pattern) for pattern in study.schema)
    study.check_evidence(spec, json.loads(json.dumps(result)), where)  # valid (NaN kept, as a record reads back)
    forged = copy.deepcopy(result)
    _set(forged, path, bad)
    message = _refused(study, spec, forged, where)
    assert message == f"{where}: {said}; delete it to recompute it" and "\n" not in message


@pytest.mark.parametrize("value, said", [("0.76", "'0.76'"), (True, "True"), (None, "None"), ([0.5], "a list of 1 items"),
                                         ({"x": 1}, "an object")])
def test_a_wrong_type_is_refused_like_a_wrong_value(value, said):
    spec, result = _circuits()
    result["final"]["dev"]["accuracy"] = value
    assert _refused(get("circuits"), spec, result, "r.json").startswith(f"r.json: final.dev.accuracy is {said}, not ")


def test_a_missing_field_and_a_list_of_the_wrong_length_are_refused():
    spec, result = _fixed_attention()
    del result["runs"][0]["attn_distinct"]
    assert "runs[0].attn_distinct is missing" in _refused(get("fixed-attention"), spec, result, "r.json")
    spec, result = _fixed_attention()
    result["runs"].pop()
    n = len(spec.params["alphas"]) * len(spec.params["seeds"])
    assert (f"runs is a list of {n - 1} items, not a list of {n} items (config alphas x seeds)"
            in _refused(get("fixed-attention"), spec, result, "r.json"))


def test_kinds_and_paths():
    """Integers may be written 3.0, never 3.5 nor a boolean; NaN passes only where a kind allows it (an infinity only
    inside the range); ``?`` makes a key optional; ``*`` covers every key; a data key is shown escaped."""
    schema = {"n": COUNT, "x?": LOSS, "nan_ok": Number(0, finite=False), "flags.*": Flag(), "name": Text(("a", "b")),
              "xs": Items(("k",)), "xs[]": FRACTION}
    good = {"n": 3.0, "nan_ok": math.nan, "flags": {"p": True}, "name": "a", "xs": [0.0, 1.0]}
    check(schema, good, {"k": [1, 2]}, "r.json", "h")
    check(schema, {**good, "nan_ok": math.inf}, {"k": 2}, "r.json", "h")
    for change, said in (({"n": 3.5}, "n is 3.5, not an integer >= 0"), ({"n": True}, "n is True"),
                         ({"n": 10 ** 400}, None), ({"x": math.inf}, "x is inf, not a number >= 0"),
                         ({"nan_ok": -math.inf}, "nan_ok is -inf"), ({"name": "c"}, "name is 'c', not one of 'a', 'b'"),
                         ({"flags": {"\x1b[2J": 1}}, r"flags['\x1b[2J'] is 1, not a boolean"),
                         ({"xs": [0.5]}, "xs is a list of 1 items, not a list of 2 items (config k)")):
        if said is None:
            check(schema, {**good, **change}, {"k": 2}, "r.json", "h")  # an int too large for a float is still exact
            continue
        with pytest.raises(InputError, match=r"^r\.json: ") as refused:
            check(schema, {**good, **change}, {"k": 2}, "r.json", "h")
        assert said in str(refused.value) and str(refused.value).endswith("; h") and "\x1b" not in str(refused.value)


def test_a_record_in_the_older_layout_is_checked_as_the_record_it_is_read_as():
    """A circuits study record holding a run's old ``final.json`` layout (read as a schema-1 record) passes; its
    impossible accuracy is refused, named by where the schema-1 record holds it."""
    spec = RunSpec.make("circuits", "vader_qk1_s0", seed=0)
    old = {"config": {"seed": 0}, "n_parameters": 50, "steps": 10, "stopped_at": 6, "target_reached": True,
           "final_train_loss": 0.1, "n_train": 20, "train_seconds": {"wall": 1.0, "cpu": 1.0},
           "dev": {"accuracy": 0.5}, "test": {"accuracy": 0.75}}
    get("circuits").check_evidence(spec, old, "r.json")
    assert _refused(get("circuits"), spec, {**old, "test": {"accuracy": 7.5}}, "r.json").startswith(
        "r.json: final.test.accuracy is 7.5, not a number in [0, 1]")


def _write(runs: Path, spec: RunSpec, result: dict) -> Path:
    path = runs / spec.study / f"{spec.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"spec": spec.to_dict(), "result": result}))
    return path


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def test_report_refuses_an_impossible_record_in_one_line_and_creates_nothing(tmp_path, capsys):
    """`qkdyn report` over a runs folder whose one stability record has an eps of -1: exit 2, one stderr line naming
    the record and the value; nothing is created (no figures folder)."""
    spec, result = _stability()
    runs = tmp_path / "runs"
    forged = copy.deepcopy(result)
    forged["evidence"]["eps"] = -1.0
    path = _write(runs, spec, forged)
    before = _tree(tmp_path)
    argv = ["report", "stability", "--budget", "quick", "--runs", str(runs), "--figures", str(tmp_path / "fig"),
            "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{path}: evidence.eps is -1.0, not a number >= 0;" in err
    assert "Traceback" not in err and _tree(tmp_path) == before


def test_judge_checks_every_record_before_the_claims(tmp_path):
    """judge() refuses before the study's claims read anything; with runs missing it reads nothing (inconclusive)."""
    spec, result = _sampled()
    study = get("sampled")
    specs = study.plan("quick")
    result["evidence"]["runs"][0]["at_level"][0]["p_true"] = 7.3
    records = {s: Record(s, result, tmp_path / "sampled" / s.name) for s in specs}
    with pytest.raises(InputError, match=rf"^{tmp_path / 'sampled' / specs[0].name}\.json: evidence\.runs\[0\]\.at_level"
                                         r"\[0\]\.p_true is 7\.3, not a number in \[0, 1\]"):
        judge(study, "quick", specs, records)
    partial = {specs[0]: records[specs[0]]}
    assert {c.verdict for c in judge(study, "quick", specs, partial)} == {"inconclusive"}


class _Measuring(Study):
    """A one-run study whose measure returns ``{"recall": value}`` and whose schema says a recall is a share."""

    name = "measuring"
    title = "measures a recall"
    schema = {"*": {"recall": FRACTION}}

    def __init__(self, value):
        self.value = value

    def plan(self, budget):
        return [RunSpec.make(self.name, "r")]

    def measure(self, spec, scratch):
        return {"recall": self.value}


def test_a_run_whose_measure_returns_an_impossible_value_is_not_recorded(tmp_path):
    spec = _Measuring(0.5).plan("quick")[0]
    with pytest.raises(InputError, match=r"^the record of run r: recall is 7\.3, not a number in \[0, 1\]; not recorded"):
        _Measuring(7.3).run(spec, tmp_path / "bad")
    assert not list((tmp_path / "bad").rglob("*.json"))
    import numpy as np

    assert _Measuring(np.float32(0.5)).run(spec, tmp_path / "ok").result["recall"] == 0.5  # checked as JSON


def _pilot_folder(tmp_path: Path, result_change=None, files=None) -> Path:
    """A coupled runs folder the pilot reads: a count model and one standard LM run."""
    runs = tmp_path / "runs"
    folder = runs / "coupled"
    folder.mkdir(parents=True)
    count = {"spec": {"study": "coupled", "name": "count", "config": {"kind": "count"}},
             "result": {"count_model": {"bigram_ppl": 16.0}}}
    (folder / "count.json").write_text(json.dumps(count))
    lm = {"spec": {"study": "coupled", "name": "lm", "config": {"kind": "train", "task": "lm", "variant": "standard",
                                                                  "train": {"seed": 0, "max_steps": 1200}}},
          "result": {"final": {"val_loss": 2.0}, "details": {"evals": [{"step": 1200, "val_loss": 2.0}],
                                                             "train_time_s": 10.0}}}
    if result_change:
        _set(lm, *result_change)
    if files is not None:
        lm["result"]["files"] = files
    (folder / "lm.json").write_text(json.dumps(lm))
    return runs


@pytest.mark.parametrize("files, change, said", [
    (["../../victim.txt"], None, "only plain file names"),
    (["notes.txt"], None, "which study coupled does not write"),
    (None, (("result", "final", "val_loss"), -1.0), "result.final.val_loss is -1.0, not a number (or NaN) >= 0"),
    (None, (("spec", "config", "train", "seed"), "0"), "spec.config.train.seed is '0', not an integer"),
    (None, (("spec", "config", "kind"), "verdict"), "spec.config.kind is 'verdict', not one of 'count', 'train'"),
])
def test_the_pilot_reads_records_through_the_same_checks(tmp_path, files, change, said):
    from qkdyn.empirical.coupled import pilot

    runs = _pilot_folder(tmp_path, change, files)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    with pytest.raises(InputError) as refused:
        pilot.write(runs, tmp_path / "out")
    message = str(refused.value)
    assert message.startswith(f"{runs / 'coupled' / 'lm.json'}: ") and said in message and "\n" not in message
    assert not (tmp_path / "out").exists() and victim.read_text() == "precious"


def test_the_pilot_reads_a_valid_folder(tmp_path):
    from qkdyn.empirical.coupled import pilot

    records, count = pilot.read_records(_pilot_folder(tmp_path))
    assert count == {"bigram_ppl": 16.0} and [r["spec"]["name"] for r in records] == ["lm"]
