"""Every theory figure is fit for a paper: rendered on small inputs, no text runs into another axes
(tight bounding box per artist), every axes and colour bar is labelled, PNG and PDF are written; the
check itself catches a planted overlapping label and an unlabelled colour bar."""
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pytest
from circuit_fakes import run_dirs as fake_run_dirs
from qkdyn.simulate import claims_coupled, claims_sharpness, claims_theory, overview, phase
from qkdyn.theory.setting import Setting

from qkdyn import figures
from qkdyn.stats import sample_summary


def assert_same_bytes_without(shortcut: str, draw, monkeypatch) -> None:
    """``draw(prefix)`` (saving figures with save_png; returns their PNG paths) gives the same PNG and PDF
    bytes with the shortcut ``figures.<shortcut>`` (a context manager) as with it replaced by a no-op."""
    import contextlib

    def saved(prefix):
        return [[path.with_suffix(suffix).read_bytes() for suffix in (".png", ".pdf")] for path in draw(prefix)]

    on = saved("on")
    monkeypatch.setattr(figures, shortcut, lambda *args: contextlib.nullcontext())
    assert on == saved("off")


def test_the_layout_check_catches_a_planted_overlapping_label_and_an_unlabelled_colour_bar(tmp_path):
    fig, axes = plt.subplots(1, 2, figsize=(6, 3), layout="none")  # no layout engine to move the plant away
    for ax in axes:
        ax.set(xlabel="x", ylabel="y")
    assert figures.layout_problems(fig) == ["y label ('y') of axes 1 overlaps axes 0"]  # without constrained layout
    fig, axes = plt.subplots(1, 2, figsize=(6, 3), layout="none")
    fig.subplots_adjust(wspace=0.6)
    for ax in axes:
        ax.set(xlabel="x", ylabel="y")
    assert figures.layout_problems(fig) == []
    axes[1].yaxis.set_label_coords(-1.1, 0.5)  # planted: the right panel's y label sits on the left panel
    assert figures.layout_problems(fig) == ["y label ('y') of axes 1 overlaps axes 0"]
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.set(xlabel="x")
    fig.colorbar(ax.pcolormesh(np.eye(2)), ax=ax)
    assert figures.layout_problems(fig) == ["axes 0 (untitled) has no y label", "colour bar of axes 1 (untitled) has no label"]
    fig2, shared = plt.subplots(1, 2, sharey=True)
    for a in shared:
        a.set(xlabel="x", ylabel="y")
        a.label_outer()  # the right panel's y label goes: its shared axis is labelled on the left
    assert shared[1].get_ylabel() == "" and figures.layout_problems(fig2) == []
    plt.close(fig2)
    with pytest.warns(figures.FigureLayoutWarning, match="planted.png: axes 0 .* has no y label"):
        figures.save_png(fig, tmp_path / "planted.png")
    with pytest.raises(ValueError, match="needs a label"):
        figures.colorbar(fig, None, ax, "")


def test_a_figure_saved_twice_is_the_same_bytes(tmp_path, monkeypatch):
    """PNG and PDF of one figure drawn twice, a day apart by the clock matplotlib reads, are
    byte-identical (the PDF carries no creation date), so a rerun of ``qkdyn verify`` rewrites figures/
    unchanged."""
    def draw(name, epoch):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [1, 4, 9])
        ax.set(xlabel="x", ylabel="y")
        return figures.save_png(fig, tmp_path / name)

    first, second = draw("a.png", "0"), draw("b.png", "86400")
    for suffix in (".png", ".pdf"):
        assert first.with_suffix(suffix).read_bytes() == second.with_suffix(suffix).read_bytes()


def test_a_figure_is_laid_out_once_for_both_files(tmp_path, monkeypatch):
    """save_png runs the style's constrained layout once, for the layout check, the PNG and the PDF: neither
    save lays the figure out again (each layout is a tight box per axis and tick label)."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    calls = []
    execute = ConstrainedLayoutEngine.execute
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", lambda self, fig: calls.append(fig) or execute(self, fig))
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        ax.plot([1, 2, 3], [1, 4, 9])
        ax.set(xlabel="x", ylabel="y")
    path = figures.save_png(fig, tmp_path / "once.png")
    assert len(calls) == 1 and path.exists() and path.with_suffix(".pdf").exists()


def test_ticks_computed_once_per_save_give_the_same_bytes(tmp_path, monkeypatch):
    """save_png computes each axis's ticks once per view, box and resolution (figures._ticks_once): the PNG
    and PDF equal those saved with matplotlib computing them at every request (log, linear and shared axes,
    a colour bar)."""
    def draw(prefix):
        fig, axes = plt.subplots(2, 3, sharey="row")
        x = np.geomspace(0.01, 100, 50)
        for i, ax in enumerate(axes.ravel()):
            ax.set(xscale="log", yscale="log" if i < 3 else "linear", xlabel="rho", ylabel="y", title=f"panel {i}")
            ax.plot(x, x**0.5 + 1e4 * (i > 2))
            ax.text(0.5, 0.5, f"{i}", transform=ax.transAxes)
        figures.colorbar(fig, axes[0, 0].pcolormesh(np.eye(3)), axes[:, -1], "c")
        return [figures.save_png(fig, tmp_path / f"{prefix}.png")]

    assert_same_bytes_without("_ticks_once", draw, monkeypatch)


def test_text_laid_out_once_per_save_gives_the_same_bytes(tmp_path, monkeypatch):
    """save_png lays out each distinct text once (figures._text_layouts_once): PNG and PDF equal those saved with
    matplotlib laying out every text at every request, for rotated, aligned, multi-line, mathtext, wrapped,
    legend, annotation and title texts of several sizes."""
    def draw(prefix):
        fig, axes = plt.subplots(1, 2, figsize=(6, 3))
        for i, ax in enumerate(axes):
            ax.plot([1, 2, 3], [1, 4, 9], label=f"run {i}\nsecond line")
            ax.set(xlabel="$\\eta_{QK} / \\eta_{OV}$", ylabel="loss", title=f"panel {i}", yscale="log")
            ax.tick_params(axis="x", labelrotation=30 + 15 * i)
            ax.legend(title="arms")
            ax.text(1.5, 2, "right\naligned", ha="right", va="top", multialignment="center", rotation=10, fontsize=7)
            ax.text(1.2, 5, "a long wrapped note " * 4, wrap=True, fontsize=6)
            ax.text(2.5, 3, "two\nlines, the second longer", multialignment=("left", "right")[i])  # differ in that only
            ax.annotate("peak", (3, 9), xytext=(2, 6), arrowprops={"arrowstyle": "->"}, rotation_mode="anchor",
                        rotation=-20)
        fig.suptitle("two panels")
        return [figures.save_png(fig, tmp_path / f"{prefix}.png")]

    assert_same_bytes_without("_text_layouts_once", draw, monkeypatch)


def test_font_subsets_in_two_stages_give_matplotlibs_bytes(tmp_path, monkeypatch):
    """The PDF's font subsets made from a once-made subset of the common characters (figures._two_stage_font_subsets)
    are the very bytes of matplotlib's one-stage subsets of the whole font: a figure of common characters
    (the two stages), one with a glyph outside them (matplotlib's own subsetting), and both again from the cache."""
    def draw(prefix):
        paths = []
        for i, label in enumerate(("rho (x 10⁻³)", "euro € ∮") * 2):
            fig, ax = plt.subplots()
            ax.plot([1, 2, 3], [1, 4, 9])
            ax.set(xlabel=label, ylabel="attn", yscale="log", title="ρ = 10")
            paths.append(figures.save_png(fig, tmp_path / f"{prefix}{i}.png"))
        return paths

    assert_same_bytes_without("_two_stage_font_subsets", draw, monkeypatch)


def test_every_theory_figure_renders_without_overlaps_and_with_labels(tmp_path, monkeypatch):
    from qkdyn.simulate.solve import solve

    def coarse(*args, **kwargs):  # small inputs: 60 output rows instead of the claims' 300-600
        return solve(*args, **{**kwargs, "points": 60})

    for module in (claims_theory, overview):
        monkeypatch.setattr(module, "solve", coarse)
    s = Setting()
    with warnings.catch_warnings():
        warnings.simplefilter("error", figures.FigureLayoutWarning)
        claims_theory.check_a1(s, 1e15, tmp_path, points=8)  # reads its solutions down to a loss level
        claims_theory.check_a2(s, 1e5, [1.0], tmp_path)
        claims_theory.check_a3(s, [1e6, 1e15], 1e15, tmp_path)  # its fits need t in [1e10, 1e15]
        claims_sharpness.plot_sweep(claims_sharpness.closed_form_sweep(s, np.array([0.1, 1.0, 10.0]), (0.1, 1e-2)),
                                    tmp_path)
        phase.plot([phase.diagram(s, axis, np.geomspace(0.01, 100, 6), 4, 1e-2) for axis in phase.AXES], 1e-2, tmp_path)
        overview.trajectories_plot(s, 1e5, tmp_path)
        overview.phase_portrait(s, (0.1, 1.0), 1e4, tmp_path)
        odds = np.array([[1.0, 2.0], [2.0, 3.0], [3.0, 4.0]])  # (rhos, levels): the layout needs no solve
        claims_coupled.plot_matched_loss([0.1, 1.0, 10.0], [1e-2, 1e-3], {"CACO": odds, "FACO": odds + 1},
                                         {"coupled/euler/linear/dt=0.2/A0=0.5": odds + 1.5,
                                          "MLP-only/linear/dt=0.2/A0=0.5": odds + 2}, tmp_path)
    pngs = sorted(p.stem for p in tmp_path.glob("*.png"))
    assert pngs == sorted(p.stem for p in tmp_path.glob("*.pdf")) and len(pngs) == 9
    assert all((tmp_path / f"{name}.pdf").read_bytes()[:5] == b"%PDF-" for name in pngs)


def test_every_synthetic_experiment_figure_renders_without_overlaps_and_with_labels(tmp_path):
    from types import SimpleNamespace

    from qkdyn.empirical.synthetic import plots

    t = np.linspace(0.0, 10.0, 20)
    forms, schedules = ["CACO", "FAFO"], ["equal", "qkfast"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", figures.FigureLayoutWarning)
        plots.overlay({p: {"ode": (t, t, 2 * t), "gd": (t, t, 2 * t), "sgd": (t, t, 2 * t), "h": 0.01, "batch": 32}
                       for p in forms}, tmp_path / "overlay.png")
        plots.convergence({p: [1e-3, 5e-4, 2.5e-4] for p in forms}, [0.04, 0.02, 0.01], tmp_path / "convergence.png")
        plots.sgd_batch([8, 32, 128], [0.05, 0.025, 0.012], tmp_path / "sgd.png", "FAFO")
        plots.adam([{"param": p, "rho": r, "attn_adam": 0.5, "attn_ode": 0.6, "recorded_steps": [0, 1, 9],
                     "adam_distance": [1e-6, 1e-3, 1e-2], "gd_distance": [1e-6] * 3, "start_distance": 1e-6}
                    for p in forms for r in (0.1, 1, 10)],
                   tmp_path / "adam.png")
        plots.symmetric_distance({p: (t + 1, np.exp(-t)) for p in forms}, tmp_path / "sym.png")
        plots.dtap({(s, p): np.full((5, 5), 4.0) for s in schedules for p in forms}, tmp_path / "dtap.png")
        plots.sampled_attention([{"form": f, "schedule": s, "attn_distinct": 0.5, "attn_distinct_sd": 0.01,
                                  "attn_query_id": 0.1, "attn_query_id_sd": 0.01} for f in forms for s in schedules],
                                tmp_path / "sampled.png", "clean")
        runs = {(f, a, s): SimpleNamespace(t=t, loss=np.exp(-a * t), fall=a * np.exp(-t))
                for f in forms for a in (0.2, 0.8) for s in (0, 1)}
        plots.fixed_attention(runs, {(f, a): (np.exp(-a * t), a * np.exp(-t)) for f in forms for a in (0.2, 0.8)},
                              tmp_path / "fixed.png")
    assert len(list(tmp_path.glob("*.png"))) == len(list(tmp_path.glob("*.pdf"))) == 8


@pytest.mark.parametrize("ratios", [(10.0,), (10.0, 30.0, 100.0)])
def test_every_transformer_circuits_figure_renders_without_overlaps_and_with_labels(tmp_path, ratios):
    """``compare-circuits``' four figures from tiny fake records (two seeds; the same-lr arm, QK arms and
    the all-parameters controls, keyed by the report's arm labels); with 7 arms the bar panels and the
    heatmaps wrap onto rows, so no figure is more than 4 times as wide as it is high (unwrapped: 6.8)."""
    import matplotlib.image
    from qkdyn.empirical.circuits import plots


    thresholds = list(np.linspace(0.0, 1.0, 11))
    arms = {"same lr": 1.0, **{f"{g} x{r:g}": r for g in ("QK", "all") for r in ratios}}
    rng = np.random.default_rng(0)
    results = {a: [{"test": {"thresholds": thresholds, "ac_curve": list(np.linspace(1, 0, 11) ** (1 + seed + m / 10)),
                             "dtap_percent": (100 * rng.dirichlet(np.ones(25)).reshape(5, 5)).tolist()}}
                   for seed in range(2)] for a, m in arms.items()}
    summary = {a: {key: sample_summary([0.7 + 0.01 * m, 0.72 + 0.01 * m]) for key in ("accuracy", "attention_mass",
                                                                                 "attention_mass_without_readout")}
               for a, m in arms.items()}
    run_dirs = fake_run_dirs(tmp_path, arms, 2, lambda seed: [  # seed 1 stopped earlier (its target loss)
        {"step": s, "dev_accuracy": 0.5 + s / 400, "dev_attention_mass": 0.2 + s / 300,
         "dev_attention_mass_without_readout": 0.1 + s / 300} for s in (0, 50, 100)[: 3 - seed]])
    out = tmp_path / "figures"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error", figures.FigureLayoutWarning)
        paths = plots.plot_all("sva", results, summary, run_dirs, "accuracy", out)
    assert len(paths) == 4
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(p.stem for p in out.glob("*.pdf"))
    for path in paths:
        height, width = matplotlib.image.imread(path).shape[:2]
        assert width <= 4 * height, path


def test_every_coupled_figure_renders_without_overlaps_and_with_labels(tmp_path):
    """``compare-coupled``'s figures (and the scale trend's) from tiny fake tables."""
    from qkdyn.empirical.coupled import report

    variants = ("standard", "coupled-euler")
    strength = {"coupling": {"init": 0.01, "final": 0.05}}
    perplexity = {corpus: {v: {"val_ppl": sample_summary([30.0 + i, 31.0 + i]), "strength": strength} for i, v in enumerate(variants)}
                  for corpus in ("wikitext", "openwebtext")}
    tokens = [0, 1000, 2000, 4000]
    result = {"coherent": "wikitext",
              "tables": {"perplexity": perplexity,
                         "steps": {"short": {1: sample_summary([30, 31]), 2: sample_summary([29, 30])},
                                   "long": {1: sample_summary([25, 26]), 2: sample_summary([24, 25])}},
                         "mqar": {task: {v: {"acc_T64": sample_summary([0.5, 0.6]), "acc_T128": sample_summary([0.4, 0.5]),
                                             "mqar_acc": sample_summary([0.45, 0.55])} for v in variants}
                                  for task in ("kv4", "kv8")}},
              "curves": {v: {"tokens": tokens, "val_ppl": [100, 60, 40, 30 + i]} for i, v in enumerate(variants)}}
    result["curves"]["standard (200 steps)"] = {"tokens": tokens, "val_ppl": [100, 70, 50, 40]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", figures.FigureLayoutWarning)
        written = report.write_plots(result, tmp_path)
        trend = [{"non-embedding parameters": n, "gap (log ppl)": g, "ci low": g - 0.02, "ci high": g + 0.02}
                 for n, g in ((1e6, -0.06), (4e6, -0.05), (1.6e7, -0.01))]
        report.render({"rows": trend, "coherent": "wikitext", "claims": []}, [],
                      {"tokenizer": "byte-level BPE", "seeds": [0, 1]}, tmp_path / "trend")
    assert len(written) == 5 and (tmp_path / "trend" / "scale_trend.pdf").exists()
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(p.stem for p in tmp_path.glob("*.pdf"))
