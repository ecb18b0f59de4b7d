"""What makes paper B's study decisive: run identity, ablations of trained models, count-model floors,
the integration horizon, the q-only control."""
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from qkdyn.empirical.coupled.attention import AttentionConfig, build_attention
from qkdyn.empirical.coupled.model import GPT, count_parameters, preset_config
from test_coupled_cli import _main  # qkdyn in this process, torch's thread count restored

from qkdyn.errors import InputError


def _corpus(tmp_path):
    words = ["query", "key", "value", "attention", "flow", "step", "head", "layer", "token", "loss"]
    rng = np.random.default_rng(0)
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(words[i] for i in rng.integers(0, len(words), 3000)))
    return str(path)


# ---- run identity --------------------------------------------------------------------------------

def test_two_study_runs_differing_only_in_learning_rate_do_not_share_a_directory():
    from qkdyn.empirical.coupled.study import StudyConfig, study_runs

    a, b = (study_runs(StudyConfig(lm_lr=lr, mqar_tasks=()))[0] for lr in (3e-3, 1e-3))
    assert a.variant == b.variant and a.train.seed == b.train.seed and a.name != b.name
    same = study_runs(StudyConfig(mqar_tasks=()))[0]
    assert same.name == a.name  # the key is a function of the config alone
    for change in ({"batch_size": 4}, {"block_size": 64}, {"seeds": 5, "vocab_size": 4096}):
        other = study_runs(StudyConfig(mqar_tasks=(), **change))[0]
        assert other.name != a.name, change


def test_a_directory_holding_another_config_is_refused_naming_the_field(tmp_path):
    from qkdyn.empirical.coupled.identity import claim, run_record
    from qkdyn.empirical.coupled.study import StudyConfig, study_runs

    spec = study_runs(StudyConfig(mqar_tasks=()))[0]
    claim(tmp_path / "run", run_record(spec))
    claim(tmp_path / "run", run_record(spec))  # the same config: accepted again
    other = dataclasses.replace(spec, train=dataclasses.replace(spec.train, lr=1e-3))
    with pytest.raises(InputError, match=r"train\.lr: 0\.003 there, 0\.001 now"):
        claim(tmp_path / "run", run_record(other))


def test_resuming_with_a_changed_config_is_one_line_naming_the_field_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    common = ["lm", "--data", _corpus(tmp_path), "--out", str(out), "--block-size", "16", "--batch-size", "2",
              "--eval-tokens", "64", "--tokenizer", "byte", "--max-steps", "2", "--threads", "1", "--no-progress"]
    assert _main(common) == 0
    capsys.readouterr()
    assert _main([*common, "--lr", "0.001"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.lr" in err and "different configuration" in err


# ---- ablations -----------------------------------------------------------------------------------

def test_f_ablation_of_a_trained_coupled_model_is_measured_on_the_validation_split(tmp_path):
    out = tmp_path / "run"
    assert _main(["lm", "--data", _corpus(tmp_path), "--out", str(out), "--block-size", "16", "--batch-size", "2",
                  "--tokenizer", "byte", "--max-steps", "3", "--attention", "coupled", "--threads", "1",
                  "--no-progress"]) == 0
    ablation = json.loads((out / "ablation.json").read_text())
    result = json.loads((out / "result.json").read_text())
    full = ablation["full"]
    assert ablation["step"] == 3 and full["val_loss"] == pytest.approx(result["final"]["val_loss"], abs=1e-6)
    val_bytes = int(len(open(_corpus(tmp_path), "rb").read()) * 0.05)  # the corpus's last 5%, all of it
    assert full["val_tokens"] == (val_bytes - 1) // 16 * 16 and full["val_tokens"] > 64
    for what in ("attention", "field", "flow"):
        assert ablation[what]["val_tokens"] == full["val_tokens"]
        assert ablation["delta"][what]["val_loss"] == pytest.approx(ablation[what]["val_loss"] - full["val_loss"])
    assert ablation["delta"]["field"]["val_loss"] != 0


def test_a_model_whose_f_is_zero_reports_exactly_zero():
    from qkdyn.empirical.coupled.ablation import ablation_effects
    from qkdyn.empirical.coupled.lm_data import LMEvaluator

    torch.manual_seed(0)
    model = GPT(preset_config("tiny", vocab_size=64, block_size=16, attention=AttentionConfig(kind="coupled")))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.field.w2.zero_()
    tokens = np.random.default_rng(0).integers(0, 64, 200)
    effects = ablation_effects(model, LMEvaluator(tokens, 16), torch.device("cpu"))
    assert effects["delta"]["field"]["val_loss"] == 0.0
    assert effects["delta"]["flow"]["val_loss"] != 0.0  # dt k still moves q


def test_ablations_apply_to_the_variants_that_have_the_part():
    from qkdyn.empirical.coupled.ablation import ablated, applicable

    assert applicable("standard") == applicable("diff") == ("attention",)
    assert applicable("mlp-only-q") == ("attention", "field", "flow")
    attn = build_attention(AttentionConfig(kind="diff"), 64, 4, 1)
    x = torch.randn(1, 8, 64)
    with ablated(attn, "attention"):
        assert torch.equal(attn(x), torch.zeros_like(x))
    assert attn.ablation is None and attn(x).abs().sum() > 0


# ---- count models --------------------------------------------------------------------------------

def test_count_models_are_the_textbook_formulas():
    from qkdyn.empirical.coupled.count_models import count_model_perplexities

    train = np.array([0, 1, 0, 1, 0, 2])
    val = np.array([0, 1, 2])
    got = count_model_perplexities(train, val, 4)
    uni = (np.bincount(train, minlength=4) + 1) / (6 + 4)
    assert got["unigram_ppl"] == pytest.approx(math.exp(-np.log(uni[[1, 2]]).mean()))
    # bigram types: (0,1) x2, (1,0) x2, (0,2) x1 -> n1 = 1, n2 = 2, D = 1 / 5; context 0 seen 3 times, 2 successors
    d = 1 / 5
    p01 = (2 - d) / 3 + d * 2 / 3 * uni[1]
    p12 = 0 + d * 1 / 2 * uni[2]  # context 1 seen twice, one successor, (1,2) never
    assert got["discount"] == pytest.approx(d)
    assert got["bigram_ppl"] == pytest.approx(math.exp(-(math.log(p01) + math.log(p12)) / 2))


def test_a_bigram_source_is_learnt_by_the_bigram_model_not_the_unigram():
    from qkdyn.empirical.coupled.count_models import count_model_perplexities

    rng = np.random.default_rng(0)
    seq = [0]
    for _ in range(20000):  # each token is followed by one of two successors
        seq.append((2 * seq[-1] + 1 + rng.integers(0, 2)) % 50)
    seq = np.array(seq)
    got = count_model_perplexities(seq[:18000], seq[18000:], 50)
    assert got["bigram_ppl"] == pytest.approx(2.0, rel=0.05) and got["unigram_ppl"] > 20


def test_the_quick_budget_runs_every_step_and_is_inconclusive_by_the_count_model_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    runs, out = tmp_path / "runs", tmp_path / "out"
    assert _main(["compare-coupled", "--train", "--budget", "quick", "--coherent", _corpus(tmp_path), "--runs", str(runs),
                  "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    records = {p.stem: json.loads(p.read_text()) for p in (runs / "coupled").glob("*.json")}
    (count,) = [r["result"]["count_model"] for name, r in records.items() if name.startswith("count-")]
    assert count["vocab"] == 256 and count["bigram_ppl"] < count["unigram_ppl"]
    trained = [d for d in (runs / "coupled").iterdir() if d.is_dir() and not d.name.startswith("count-")]
    assert len(trained) == len(records) - 1
    assert all((d / "ablation.json").exists() and (d / "run.json").exists() for d in trained)
    claims = json.loads((out / "report.json").read_text())["claims"]
    assert {c["id"] for c in claims} == {"B1", "B2", "B3", "B6", "B9"}
    for c in claims:  # 3 steps learn nothing: every verdict inconclusive, naming the precondition it lacks
        assert c["verdict"] == "inconclusive", c["id"]
        unmet = [p["name"] for p in c["preconditions"] if not p["met"]]
        assert unmet and c["summary"].startswith("Inconclusive before any effect is read"), c["id"]
        assert any("bigram" in n for n in unmet) if c["id"] != "B9" else any("guessing" in n for n in unmet)
    report = (out / "report.md").read_text()
    assert "standard ppl below the bigram model" in report and "bigram ppl" in report


# ---- the integration horizon and the q-only control -----------------------------------------------

def test_fixed_horizon_takes_n_steps_of_dt_over_n_and_step_horizon_n_steps_of_dt():
    from qkdyn.empirical.coupled.qk_flow import integrate

    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)
    outs = {}
    for horizon in ("step", "fixed"):
        attn = build_attention(AttentionConfig(kind="coupled", steps=5, horizon=horizon), 64, 4, 1)
        with torch.no_grad():
            outs[horizon] = attn.transform_qk(q, k)
            dt = attn.dt / 5 if horizon == "fixed" else attn.dt
            want = integrate(q, k, attn.field, dt, "euler", 5)
        assert all(torch.equal(a, b) for a, b in zip(outs[horizon], want, strict=True)), horizon
    one = build_attention(AttentionConfig(kind="coupled", steps=1, horizon="fixed"), 64, 4, 1)
    with torch.no_grad():
        assert torch.equal(one.transform_qk(q, k)[0], q + one.dt.view(-1, 1, 1) * k)  # n = 1: both readings agree


def test_fixed_horizon_converges_to_the_flow_as_n_grows():
    torch.manual_seed(1)
    q, k = torch.randn(1, 4, 8, 16, dtype=torch.float64), torch.randn(1, 4, 8, 16, dtype=torch.float64)

    def flow(n):
        torch.manual_seed(2)
        attn = build_attention(AttentionConfig(kind="coupled", steps=n, horizon="fixed", dt_init=0.5), 64, 4, 1).double()
        with torch.no_grad():
            return attn.transform_qk(q, k)[0]

    fine = flow(256)
    assert (flow(8) - fine).norm() < 0.2 * (flow(1) - fine).norm()  # Euler's error shrinks ~1/n


def test_the_q_only_control_leaves_k_and_has_the_coupled_parameter_count():
    cfg = AttentionConfig(kind="mlp-only-q")
    attn = build_attention(cfg, 64, 4, 1)
    q, k = torch.randn(1, 4, 8, 16), torch.randn(1, 4, 8, 16)
    with torch.no_grad():
        q1, k1 = attn.transform_qk(q, k)
    assert torch.equal(k1, k) and not torch.equal(q1, q)
    coupled = preset_config("tiny", attention=AttentionConfig(kind="coupled"))
    assert count_parameters(preset_config("tiny", attention=cfg)) == count_parameters(coupled)
    assert sum(p.numel() for p in GPT(preset_config("tiny", attention=cfg)).parameters()) == count_parameters(coupled)


def test_flops_count_the_second_av_product_of_differential_attention():
    from qkdyn.empirical.coupled.model import flops_per_token

    std = preset_config("60M")
    diff = preset_config("60M", attention=AttentionConfig(kind="diff"))
    assert flops_per_token(diff) - flops_per_token(std) == 3 * 12 * 1024 * 640


def test_an_mqar_task_redefined_under_its_name_is_another_run(monkeypatch):
    from qkdyn.empirical.coupled import configs
    from qkdyn.empirical.coupled.study import StudyConfig, study_runs

    study = StudyConfig(mqar_tasks=("small",), variants=("standard",), seeds=1)
    mqar = [r.name for r in study_runs(study) if r.task == "mqar"]
    lm = [r.name for r in study_runs(study) if r.task == "lm"]
    redefined = dataclasses.replace(configs.MQAR_PRESETS["small"], random_non_queries=False)
    monkeypatch.setitem(configs.MQAR_PRESETS, "small", redefined)
    assert mqar and set(mqar).isdisjoint(r.name for r in study_runs(study) if r.task == "mqar")
    assert [r.name for r in study_runs(study) if r.task == "lm"] == lm  # language-model runs keep theirs


def test_mqar_runs_are_keyed_by_their_models_init_and_language_models_are_not(monkeypatch):
    from qkdyn.empirical.coupled import configs
    from qkdyn.empirical.coupled.identity import run_record
    from qkdyn.empirical.coupled.study import StudyConfig, study_runs

    study = StudyConfig(mqar_tasks=("small",), variants=("standard",), seeds=1)
    runs = study_runs(study)
    assert {run_record(r).get("init") for r in runs} == {configs.MQAR_INIT, None}  # recorded for MQAR only
    names = [r.name for r in runs]
    monkeypatch.setattr(configs, "MQAR_INIT", "nanogpt")
    for run, before in zip(runs, names, strict=True):
        assert (run.name == before) == (run.task == "lm"), before
