"""Trainer: schedule, optimiser groups, exact resume after SIGKILL, and 2-process DDP (gloo)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from qkdyn.empirical.coupled.model import GPT, preset_config
from qkdyn.empirical.coupled.train import TrainConfig, lr_at, make_optimizer
from repo_paths import ROOT


def _corpus(tmp_path: Path) -> Path:
    words = ["query", "key", "value", "attention", "flow", "step", "head", "layer", "token", "loss"]
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(words), (6000,), generator=g).tolist()
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(words[i] for i in idx))
    return path


def _lm_cmd(data: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "qkdyn.cli", "lm", "--data", str(data), "--out", str(out), "--block-size", "32",
            "--batch-size", "2", "--eval-tokens", "512", "--threads", "1", "--no-progress", "--tokenizer", "byte", *extra]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _main_in_process(argv: list[str]) -> int:
    """``qkdyn`` in this process (no interpreter start-up), restoring torch's thread count."""
    from qkdyn.cli import main

    threads = torch.get_num_threads()
    try:
        return main(argv[3:])
    finally:
        torch.set_num_threads(threads)


def _metrics(out: Path) -> list[dict]:
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if k != "train_time_s"} for m in lines]


def test_schedule_warms_up_then_decays_to_min_lr():
    cfg = TrainConfig(max_steps=100, warmup_steps=10, lr=1.0, min_lr=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(100, cfg) == pytest.approx(0.1)
    assert all(lr_at(s, cfg) >= lr_at(s + 1, cfg) for s in range(10, 100))


def test_weight_decay_only_on_matrices():
    from qkdyn.empirical.coupled.attention import AttentionConfig

    model = GPT(preset_config("tiny", attention=AttentionConfig(kind="coupled")))
    decay, no_decay = make_optimizer(model, TrainConfig(), "cpu").param_groups
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert any(p.shape == (4,) for p in no_decay["params"])  # the per-head dt
    assert no_decay["weight_decay"] == 0.0


def test_resume_after_kill_reproduces_uninterrupted_run(tmp_path):
    data = _corpus(tmp_path)
    args = ("--attention", "coupled", "--integrator", "leapfrog", "--max-steps", "150", "--ckpt-interval", "10",
            "--eval-interval", "50")
    full, killed = tmp_path / "full", tmp_path / "killed"
    assert _main_in_process(_lm_cmd(data, full, *args)) == 0

    proc = subprocess.Popen(_lm_cmd(data, killed, *args), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (killed / "checkpoint.pt").exists() and proc.poll() is None:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed / "result.json").exists()
    subprocess.run(_lm_cmd(data, killed, *args), check=True, env=_env(), capture_output=True)

    assert _metrics(killed) == _metrics(full)
    a = torch.load(full / "checkpoint.pt", weights_only=True)
    b = torch.load(killed / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] == 150
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_resume_with_another_configuration_is_a_user_error(tmp_path):
    data = _corpus(tmp_path)
    out = tmp_path / "run"
    assert _main_in_process(_lm_cmd(data, out, "--max-steps", "2")) == 0
    assert _main_in_process(_lm_cmd(data, out, "--max-steps", "2", "--attention", "diff")) == 2


def test_ddp_two_processes_equal_one_process_with_accumulation(tmp_path):
    data = _corpus(tmp_path)
    common = ("--max-steps", "4", "--eval-interval", "4", "--ckpt-interval", "4", "--attention", "coupled")
    single = tmp_path / "single"
    assert _main_in_process(_lm_cmd(data, single, *common, "--grad-accum", "2")) == 0
    ddp = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           *_lm_cmd(data, ddp, *common)[1:]]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True)["model"] for d in (single, ddp))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    r = json.loads((ddp / "result.json").read_text())
    assert r["config"]["world_size"] == 2 and r["details"]["tokens"] == 4 * 2 * 2 * 32


def test_bpe_run_logs_coupling_strength_and_per_token_and_per_byte_perplexity(tmp_path, monkeypatch):
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    data, out = _corpus(tmp_path), tmp_path / "bpe"
    cmd = [a for a in _lm_cmd(data, out, "--max-steps", "4", "--eval-interval", "2", "--attention", "coupled",
                              "--vocab-size", "300") if a not in ("--tokenizer", "byte")]
    assert _main_in_process(cmd) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["tokenizer"] == "bpe" and result["config"]["model"]["vocab_size"] == 300
    evals = [m for m in _metrics(out) if m["kind"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2, 4]  # the initial model is evaluated too
    assert all(e["field_ratio"] > 0.1 and e["coupling"] > 0.01 and e["qk_change"] > 0 for e in evals)  # logged at init and over training
    final = result["final"]
    assert final["val_ppl_lo"] < final["val_ppl"] < final["val_ppl_hi"]
    # the corpus's words average ~6 bytes: a BPE token spans several bytes, so per byte < per token
    assert 1 < final["val_ppl_byte"] < final["val_ppl"] and final["val_bytes"] > final["val_tokens"]
    assert list((tmp_path / "cache" / "bpe").iterdir())  # the tokenizer is cached with the corpus
