"""Command line of the coupled-QK study: user errors, a tiny MQAR run, and the report from fake runs."""
import json
import subprocess
import sys

import pytest
import torch

from qkdyn.empirical.coupled.analysis import analyse, load_runs, tokens_to_target
from qkdyn.cli import main


def _main(argv):
    threads = torch.get_num_threads()
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)


def test_help_does_not_import_torch():
    code = "import sys; from qkdyn.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_variant_names_of_the_command_match_the_study():
    from qkdyn.empirical.coupled.cli_compare import VARIANTS
    from qkdyn.empirical.coupled.study import LM_VARIANTS

    assert VARIANTS == tuple(LM_VARIANTS)


@pytest.mark.parametrize("argv,message", [
    (["lm", "--data", "/no/such/corpus", "--out", "x"], "neither a corpus name"),
    (["lm", "--data", "wiki", "--out", "x", "--attention", "mlp-only", "--coupling-hidden", "3"], "even"),
    (["lm", "--data", "wiki", "--out", "x", "--max-steps", "0"], "--max-steps"),
    (["compare-coupled", "--runs", "/no/runs", "--out", "{tmp}"], "no finished runs"),
    (["compare-coupled", "--mqar-tasks", "tiny", "--out", "{tmp}"], "--mqar-tasks: must be a comma-separated subset of easy"),
    (["compare-coupled", "--variants", "standard,fancy", "--out", "{tmp}"], "--variants"),
])
def test_user_errors_are_one_line_exit_2(argv, message, tmp_path, capsys):
    assert _main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_mqar_command_trains_and_reports(tmp_path, capsys):
    out = tmp_path / "mqar"
    assert _main(["mqar", "--task", "easy", "--out", str(out), "--max-steps", "3", "--batch-size", "4",
                  "--n-test", "8", "--eval-interval", "3", "--attention", "coupled", "--no-progress", "--threads", "1"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["task"] == "mqar" and 0 <= result["final"]["mqar_acc"] <= 1
    assert "mqar_acc" in capsys.readouterr().out


def _fake_run(root, data, attention, seed, final_ppl, task="lm", steps=1):
    name = f"{task}-{data}-{attention['kind']}-{attention.get('integrator', 'euler')}-n{steps}-s{seed}"
    d = root / name
    d.mkdir()
    att = {"kind": "standard", "integrator": "euler", "steps": steps, "hidden": 4, "dt_init": 0.1, **attention}
    curve = [final_ppl * f for f in (3.0, 1.5, 1.0)]
    evals = [{"kind": "eval", "step": 10 * (i + 1), "tokens": 1000 * (i + 1), "val_ppl": p} for i, p in enumerate(curve)]
    final = {"val_ppl": final_ppl} if task == "lm" else {"acc_T64_kv4": final_ppl, "mqar_acc": final_ppl}
    if task == "mqar":
        evals = [{"kind": "eval", "step": 10, "tokens": 1000, **final}]
    result = {"task": task, "data": data, "mqar": data, "preset": "tiny", "model": {"attention": att},
              "train": {"seed": seed}, "tokens": 3000, "tokens_per_s": 1000.0 * (2 if att["kind"] == "standard" else 1),
              "parameters": 100, "final": final}
    (d / "result.json").write_text(json.dumps(result))
    (d / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def _fake_study(root, gains=(0.9, 1.1)):
    for seed in range(3):
        for data, gain in zip(("wiki", "web"), gains):
            _fake_run(root, data, {"kind": "standard"}, seed, 10.0 + 0.1 * seed)
            _fake_run(root, data, {"kind": "coupled"}, seed, gain * 10.0 + 0.01 * seed)
            _fake_run(root, data, {"kind": "coupled", "integrator": "leapfrog"}, seed, gain * 10.0 + 0.01 * seed + 0.001)
            _fake_run(root, data, {"kind": "mlp-only"}, seed, 10.0 + 0.3 * seed)
            _fake_run(root, data, {"kind": "diff"}, seed, 9.5 + 0.1 * seed)
    for n in range(2, 8):
        _fake_run(root, "wiki", {"kind": "coupled"}, 0, 9.0 + 0.001 * n, steps=n)
    for task in ("easy", "medium"):
        _fake_run(root, task, {"kind": "standard"}, 0, 0.5, task="mqar")
        _fake_run(root, task, {"kind": "coupled"}, 0, 1.0, task="mqar")


def test_verdicts_follow_the_rules(tmp_path):
    _fake_study(tmp_path)
    claims = analyse(load_runs(tmp_path), "wiki", "web")["claims"]
    by_prefix = lambda prefix: next(c for c in claims if c["claim"].startswith(prefix))  # noqa: E731
    for prefix in ("coupled QK lowers perplexity", "coupling, not the extra MLP", "coupling steadies training",
                   "Hamiltonian (leapfrog) and Euler", "1-7 integration steps", "coupled QK beats Differential",
                   "helps on domain-coherent text", "MQAR"):
        assert by_prefix(prefix)["verdict"] == "holds", prefix
    # the coupled curve (27, 13.5, 9) reaches standard's mean final 10.1 at 2870 tokens: 3000/2870 < 2.4
    assert by_prefix("sample efficiency")["verdict"] == "inconclusive"
    assert by_prefix("sample efficiency")["ratio"] == pytest.approx(3000 / (2000 + (13.5 - 10.1) / 4.5 * 1000), rel=1e-2)


def test_a_claim_that_does_not_hold_is_reported_as_failing(tmp_path):
    _fake_study(tmp_path, gains=(1.1, 0.9))  # coupled worse on the coherent corpus, better on the other
    verdicts = {c["claim"][:12]: c["verdict"] for c in analyse(load_runs(tmp_path), "wiki", "web")["claims"]}
    assert verdicts["coupled QK l"] == verdicts["helps on dom"] == verdicts["sample effic"] == "fails"


def test_tokens_to_target_interpolates():
    evals = [{"tokens": 100, "val_ppl": 20.0}, {"tokens": 200, "val_ppl": 10.0}]
    assert tokens_to_target(evals, 15.0) == pytest.approx(150)
    assert tokens_to_target(evals, 25.0) == 100 and tokens_to_target(evals, 5.0) is None


def test_compare_writes_report_plots_and_readme_section(tmp_path, capsys):
    runs, out = tmp_path / "runs", tmp_path / "fig"
    runs.mkdir()
    _fake_study(runs)
    assert _main(["compare-coupled", "--runs", str(runs), "--out", str(out), "--coherent", "wiki",
                  "--heterogeneous", "web"]) == 0
    for name in ("report.md", "summary.json", "README-section.md", "perplexity_by_variant.png",
                 "sample_efficiency.png", "coupling_steps.png", "throughput.png", "mqar_accuracy.png"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "**holds**" in report and "x2.00" in report  # standard is twice as fast in the fake runs
    assert json.loads((out / "summary.json").read_text())["claims"]
