"""What the training side records for paper B's judges (issue 41): ablations, per-head dt and coupling at
every evaluation, per-run instability diagnostics and CPU time (kept across a resume), the variants
f as wide as the head and f's output starting at zero, Differential Attention's initial scale, and
the B7 grid and MQAR curves in the plan."""
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import GPT, count_parameters, flops_per_token, preset_config
from qkdyn.empirical.coupled.train import Diagnostics, TrainConfig

from qkdyn.errors import InputError

WORDS = ["query", "key", "value", "attention", "flow", "step", "head", "layer", "token", "loss"]


def _corpus(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 3000)))
    return str(path)


def _train_config(**overrides) -> TrainConfig:
    base = dict(max_steps=3, batch_size=2, lr=3e-3, min_lr=3e-4, warmup_steps=1, eval_interval=1, ckpt_interval=1,
                log_interval=1, device="cpu", progress=False)
    return TrainConfig(**{**base, **overrides})


def _lm(tmp_path, attention: AttentionConfig, name="run", **train):
    from qkdyn.empirical.coupled.experiment import run_lm

    torch.set_num_threads(1)
    out = tmp_path / name
    record = run_lm(_corpus(tmp_path), "tiny", attention, _train_config(**train), str(out), block_size=16,
                    eval_tokens=256, tokenizer="byte")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return record, [r for r in rows if r["kind"] == "eval"], out


# ---- every evaluation row --------------------------------------------------------------------------

def test_every_evaluation_of_a_coupled_run_carries_its_ablations_dt_and_coupling_per_head(tmp_path):
    record, evals, out = _lm(tmp_path, AttentionConfig(kind="coupled"))
    assert [e["step"] for e in evals] == [0, 1, 2, 3]
    for e in evals:
        assert set(e["ablation"]) == {"attention", "field", "flow"}
        assert all(set(change) == {"val_loss"} and math.isfinite(change["val_loss"]) for change in e["ablation"].values())
        assert len(e["dt_per_head"]) == len(e["field_ratio_per_head"]) == 2  # layers
        assert all(len(heads) == 4 for heads in (*e["dt_per_head"], *e["field_ratio_per_head"]))
        per_head = np.array(e["field_ratio_per_head"])
        assert per_head.mean() == pytest.approx(e["coupling"], rel=1e-5)  # the per-head form of the coupling
    assert evals[0]["dt_per_head"] == [[pytest.approx(0.1)] * 4] * 2  # dt_init, before any step
    assert evals[-1]["dt_per_head"] != evals[0]["dt_per_head"]  # dt is learnt
    # the row's ablation is the one of the final checkpoint on the same evaluator (ablation.json)
    final = json.loads((out / "ablation.json").read_text())["delta"]
    for what, change in final.items():
        assert evals[-1]["ablation"][what]["val_loss"] == pytest.approx(change["val_loss"], abs=1e-9)
    assert evals[-1]["ablation"]["attention"]["val_loss"] != 0


def test_ablation_json_is_the_last_evaluation_of_the_final_model_not_a_second_one(tmp_path, monkeypatch):
    from qkdyn.empirical.coupled.lm_data import LMEvaluator

    calls = []
    evaluate = LMEvaluator.__call__
    monkeypatch.setattr(LMEvaluator, "__call__", lambda self, model, device: calls.append(1) or evaluate(self, model, device))
    record, evals, out = _lm(tmp_path, AttentionConfig(kind="coupled"))
    assert len(calls) == len(evals) * 4  # each evaluation: as trained and under its three ablations; none after
    ablation = json.loads((out / "ablation.json").read_text())
    assert ablation["step"] == record.steps == evals[-1]["step"]
    assert ablation["delta"] == evals[-1]["ablation"]
    assert ablation["full"]["val_loss"] == evals[-1]["val_loss"]


def test_a_run_resumed_at_its_last_step_writes_ablation_json_again(tmp_path):
    """Killed after its final checkpoint, before ablation.json: the rerun resumes at the last step, evaluates that
    model once (the loop evaluates nothing there) and writes the same file."""
    _, _, out = _lm(tmp_path, AttentionConfig(kind="coupled"))
    first = json.loads((out / "ablation.json").read_text())
    (out / "ablation.json").unlink()
    _lm(tmp_path, AttentionConfig(kind="coupled"))
    assert json.loads((out / "ablation.json").read_text()) == first


def test_a_standard_run_ablates_attention_only_and_has_no_flow_figures(tmp_path):
    record, evals, _ = _lm(tmp_path, AttentionConfig())
    assert all(set(e["ablation"]) == {"attention"} for e in evals)
    assert not any("dt_per_head" in e or "field_ratio_per_head" in e for e in evals)


def test_mqar_rows_carry_the_recall_change_of_each_ablation(tmp_path):
    from qkdyn.empirical.coupled.experiment import run_mqar

    torch.set_num_threads(1)
    run_mqar("small", "tiny", AttentionConfig(kind="coupled"), _train_config(max_steps=2, batch_size=4),
             str(tmp_path / "mqar"), n_test=8)
    rows = [json.loads(line) for line in (tmp_path / "mqar" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(evals) == 3 and all(set(e["ablation"]["flow"]) == {"mqar_acc"} for e in evals)


# ---- per-run diagnostics and CPU time --------------------------------------------------------------

def test_a_run_record_holds_its_diagnostics_and_cpu_time(tmp_path):
    record, _, _ = _lm(tmp_path, AttentionConfig(kind="coupled"), grad_clip=1e-3)
    d = record.details
    assert d["cpu_time_s"] > 0 and d["train_time_s"] > 0
    diag = d["diagnostics"]
    assert set(diag) == {"max_grad_norm", "clipped_fraction", "loss_spikes", "grad_norm_every"}
    assert diag["max_grad_norm"] > 1e-3 and diag["clipped_fraction"] == 1.0  # every norm is above a clip of 1e-3
    assert diag["loss_spikes"] == 0 and diag["grad_norm_every"] == 1  # 3 steps: no window of 50 yet


def test_clipping_off_still_measures_the_norm_and_clips_nothing(tmp_path):
    record, _, _ = _lm(tmp_path, AttentionConfig(), grad_clip=0.0)
    assert record.details["diagnostics"]["max_grad_norm"] > 0
    assert record.details["diagnostics"]["clipped_fraction"] == 0.0


def _observed(losses, grad_norm=0.5) -> Diagnostics:
    diagnostics = Diagnostics(grad_clip=1.0)
    for loss in losses:
        diagnostics.observe(loss, grad_norm)
    return diagnostics


def test_loss_spikes_exceed_the_running_mean_by_the_larger_of_3_sd_and_half_the_mean():
    flat = [1.0] * Diagnostics.WINDOW  # sd 0: the threshold is 50% above the mean
    assert _observed([*flat, 1.49]).spikes == 0 and _observed([*flat, 1.51]).spikes == 1
    noisy = [1.0 + (0.3 if i % 2 else -0.3) for i in range(Diagnostics.WINDOW)]  # sd 0.303: 3 sd = 0.91 > 0.5
    assert _observed([*noisy, 1.8]).spikes == 0 and _observed([*noisy, 1.95]).spikes == 1
    assert _observed([1.0, 1.0, 100.0]).spikes == 0  # fewer than 50 earlier steps: not judged
    # the 50th step is not judged (49 before it); the 52nd is, against a window holding the 50th
    assert _observed([*flat[1:], 3.0, 1.0, 3.0]).spikes == 1
    diagnostics = _observed(flat, grad_norm=0.5)
    diagnostics.observe(1.0, 2.0)
    assert diagnostics.summary() == {"max_grad_norm": 2.0, "clipped_fraction": 1 / (Diagnostics.WINDOW + 1),
                                     "loss_spikes": 0, "grad_norm_every": 1}
    diagnostics.observe(1.0, math.nan)
    assert diagnostics.summary()["max_grad_norm"] == math.inf


GRAD_CLIP = 1.2  # the run's pre-clip norms go from ~3-8 at the start to ~0.7-1.5 by step 64: some clipped, some not


def test_diagnostics_and_cpu_time_survive_an_interruption(tmp_path):
    """Killed after step 57 (checkpoint at 50, inside the 50-step window of the spike rule), then
    resumed: the same diagnostics, checkpointed state and metrics as the uninterrupted run."""
    from qkdyn.empirical.coupled.experiment import EvaluationRow
    from qkdyn.empirical.coupled.lm_data import LMBatches, LMEvaluator
    from qkdyn.empirical.coupled.train import train

    torch.set_num_threads(1)
    tokens = np.frombuffer(open(_corpus(tmp_path), "rb").read(), dtype=np.uint8).astype(np.int64)
    model_cfg = preset_config("tiny", block_size=16, n_layer=1, attention=AttentionConfig(kind="coupled"))
    cfg = _train_config(max_steps=64, grad_clip=GRAD_CLIP, eval_interval=32, ckpt_interval=25, log_interval=8, lr=2e-2)
    evaluator = LMEvaluator(tokens[-400:], 16)

    def run(out, stop_after=None):
        return train(model_cfg, cfg, lambda seed, rank, world: LMBatches(tokens[:-400], 16, 2, 1, seed, rank, world),
                     EvaluationRow(evaluator, evaluator.x[:2]), out, stop_after=stop_after)

    full = run(tmp_path / "full")
    assert run(tmp_path / "killed", stop_after=57) is None
    resumed = run(tmp_path / "killed")
    diag = full.details["diagnostics"]
    assert 0 < diag["clipped_fraction"] < 1  # some steps clipped, some not: the count is carried over
    assert resumed.details["diagnostics"] == diag
    assert resumed.details["cpu_time_s"] > 0
    states = [torch.load(d / "checkpoint.pt", weights_only=True)["extra"]["diagnostics"]
              for d in (tmp_path / "full", tmp_path / "killed")]
    assert states[0] == states[1] and len(states[0]["recent"]) == Diagnostics.WINDOW

    def rows(d):
        return [{k: v for k, v in json.loads(line).items() if k != "train_time_s"}
                for line in (d / "metrics.jsonl").read_text().splitlines()]

    assert rows(tmp_path / "killed") == rows(tmp_path / "full")


def test_a_checkpoint_without_diagnostics_resumes_with_them_not_measured(tmp_path):
    from qkdyn.empirical.coupled.experiment import EvaluationRow
    from qkdyn.empirical.coupled.lm_data import LMBatches, LMEvaluator
    from qkdyn.empirical.coupled.train import train

    torch.set_num_threads(1)
    tokens = np.frombuffer(open(_corpus(tmp_path), "rb").read(), dtype=np.uint8).astype(np.int64)
    model_cfg = preset_config("tiny", block_size=16, n_layer=1)
    cfg = _train_config(max_steps=4, ckpt_interval=2, eval_interval=4)
    evaluator = LMEvaluator(tokens[-400:], 16)

    def run(stop_after=None):
        return train(model_cfg, cfg, lambda seed, rank, world: LMBatches(tokens[:-400], 16, 2, 1, seed, rank, world),
                     EvaluationRow(evaluator, evaluator.x[:2]), tmp_path / "run", stop_after=stop_after)

    assert run(stop_after=3) is None
    path = tmp_path / "run" / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    state["extra"] = {"train_time_s": state["extra"]["train_time_s"]}  # as written before they existed
    torch.save(state, path)
    record = run()
    assert record.details["diagnostics"] is None and record.details["cpu_time_s"] is None
    assert record.details["train_time_s"] > 0


# ---- the reviewer's variants ------------------------------------------------------------------------

def test_every_study_variant_is_named_back_from_its_record():
    from qkdyn.empirical.coupled.study import LM_VARIANTS, variant_label

    for name, attention in LM_VARIANTS.items():
        assert variant_label(dataclasses.asdict(attention)) == name
    old = {"kind": "coupled", "integrator": "euler", "steps": 1, "hidden": 4, "dt_init": 0.1}  # before these fields
    assert variant_label(old) == "coupled-euler"
    assert variant_label({**old, "integrator": "leapfrog", "field_gain": 0.0}) == "coupled-leapfrog-identity"


@pytest.mark.parametrize("name", ["coupled-wide", "coupled-identity"])
def test_the_new_variants_build_count_and_train_one_step(name, tmp_path):
    from qkdyn.empirical.coupled.study import LM_VARIANTS

    attention = LM_VARIANTS[name]
    cfg = preset_config("tiny", block_size=16, attention=attention)
    torch.manual_seed(0)
    model = GPT(cfg)
    field = model.blocks[0].attn.field
    assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg)
    d_head = cfg.d_model // cfg.n_head
    hidden = d_head if name == "coupled-wide" else 4
    assert field.w1.shape == (cfg.n_head, d_head, hidden)
    base = preset_config("tiny", block_size=16, attention=AttentionConfig(kind="coupled"))
    widened = flops_per_token(cfg) - flops_per_token(base)
    assert widened == (3 * cfg.n_layer * cfg.n_head * 4 * d_head * (hidden - 4))
    record, evals, _ = _lm(tmp_path, attention, max_steps=1)
    assert record.steps == 1 and math.isfinite(record.final["val_loss"])
    if name == "coupled-identity":
        assert not field.w2.any()  # f's output layer starts at zero: the flow is the drift q += dt k
        assert evals[0]["coupling"] == 0.0 and evals[0]["ablation"]["field"]["val_loss"] == 0.0
        assert evals[0]["ablation"]["flow"]["val_loss"] != 0.0  # the drift acts
        assert evals[1]["coupling"] > 0  # one step moves f's output layer off zero
    else:
        assert evals[0]["field_ratio"] > 0.1


def test_a_wide_field_for_mlp_only_needs_an_even_head_width():
    from qkdyn.empirical.coupled.attention import build_attention

    with pytest.raises(ValueError, match="even"):
        build_attention(AttentionConfig(kind="mlp-only", field_width="head"), 60, 4, 1)  # d_head 15
    with pytest.raises(InputError, match="coupling.hidden"):
        AttentionConfig(kind="mlp-only", hidden=5)


# ---- Differential Attention's initial scale -------------------------------------------------------------

def _attention_output_rms(kind: str, n_head: int, x: torch.Tensor, gain_one: bool = False) -> list[float]:
    torch.manual_seed(0)
    model = GPT(preset_config("tiny", n_head=n_head, attention=AttentionConfig(kind=kind)))
    if gain_one:  # the reference implementation's RMSNorm gain
        for block in model.blocks:
            torch.nn.init.ones_(block.attn.subln.weight)
    out = []
    hooks = [b.attn.register_forward_hook(lambda m, i, o: out.append(float(o.pow(2).mean().sqrt())))
             for b in model.blocks]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return out


@pytest.mark.parametrize("n_head", [4, 16])
def test_differential_attention_starts_at_standard_attentions_output_scale(n_head, tmp_path):
    text = open(_corpus(tmp_path), "rb").read()
    tokens = torch.from_numpy(np.frombuffer(text, dtype=np.uint8).astype(np.int64))
    x = torch.stack([tokens[i:i + 128] for i in range(0, 16 * 600, 600)])
    standard = _attention_output_rms("standard", n_head, x)
    diff = _attention_output_rms("diff", n_head, x)
    for s, d in zip(standard, diff, strict=True):
        assert 0.5 < d / s < 2, (standard, diff)
    reference = _attention_output_rms("diff", n_head, x, gain_one=True)
    assert all(r / s > 5 for s, r in zip(standard, reference, strict=True))  # what the gain of 1 gave


# ---- the plan --------------------------------------------------------------------------------------

def test_the_plan_holds_the_b7_grid_and_the_new_variants_beside_an_unchanged_main_grid():
    from qkdyn.empirical.coupled.study import StudyConfig, study_runs

    study = StudyConfig(mqar_tasks=(), sweep_steps=(), lm_lr=4e-3, seeds=2)
    runs = study_runs(study)
    main = [r for r in runs if r.n_head is None]
    b7 = [r for r in runs if r.n_head is not None]
    assert {r.variant for r in main} == set(study.variants) - {"diff"}
    assert {"coupled-wide", "coupled-identity"} <= {r.variant for r in main}
    assert all(r.train.lr == 4e-3 and r.preset == "tiny" for r in main)
    assert all(r.n_head == 2 * study.diff_heads == 16 for r in b7)
    for seed in range(2):
        grid = {(r.variant, r.train.lr) for r in b7 if r.train.seed == seed}
        assert grid == {("standard", 4e-3), ("coupled-euler", 4e-3), ("diff", 2e-3), ("diff", 4e-3), ("diff", 8e-3)}
    assert len({r.name for r in runs}) == len(runs)
    assert study_runs(dataclasses.replace(study, b7_seeds=1, diff_lr_factors=(1.0,)))[-3:] == [
        r for r in b7 if r.train.seed == 0 and r.train.lr == 4e-3]
    assert not [r for r in study_runs(dataclasses.replace(study, variants=("standard", "coupled-euler")))
                if r.n_head]
    with pytest.raises(InputError, match="diff.heads"):
        study_runs(dataclasses.replace(study, diff_heads=3))  # 6 heads do not divide d_model 64


def test_mqar_runs_are_evaluated_at_least_20_times_and_the_cpu_budget_runs_easy_and_medium():
    from qkdyn.empirical.coupled.study import BUDGETS, study_runs

    cpu = BUDGETS["cpu"]
    assert cpu.mqar_tasks == ("easy", "medium")
    mqar = [r for r in study_runs(cpu) if r.task == "mqar"]
    assert {r.data for r in mqar} == {"easy", "medium"}
    assert all(r.train.max_steps // r.train.eval_interval >= 20 for r in mqar)
