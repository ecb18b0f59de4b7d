"""One typed configuration per study: its budgets are instances of it, and the study commands' help
shows each budget's value of every flag, generated from those instances."""
from __future__ import annotations

import argparse
import dataclasses
import functools

import pytest

from qkdyn.cli import build_parser
from qkdyn.configflags import KEY, budget_defaults, by_budget, check_config, grouped, shown
from qkdyn.studies import BUDGETS, STUDIES, get


@pytest.mark.parametrize("name", list(STUDIES))
def test_every_budget_of_every_study_is_an_instance_of_its_one_config_class(name):
    study = get(name)
    cls = study.config_class
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, f"{name}: no frozen config class"
    assert tuple(study.budgets) == BUDGETS
    for budget in BUDGETS:
        cfg = study.budget(budget)
        assert type(cfg) is cls, f"{name} at {budget}: a {type(cfg).__name__}, not a {cls.__name__}"
        check_config(cfg)  # every field with a domain holds a value inside it
        assert not any(value in ("task", "quick") for value in dataclasses.asdict(cfg).values()), \
            f"{name} at {budget}: a placeholder value"


def test_one_class_is_named_run_spec():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    named = [str(path.relative_to(root)) for folder in ("qkdyn", "theory", "simulate", "empirical")
             for path in (root / folder).rglob("*.py")
             if any(isinstance(node, ast.ClassDef) and node.name == "RunSpec"
                    for node in ast.walk(ast.parse(path.read_text())))]
    assert named == ["qkdyn/studies.py"]


def test_the_coupled_run_is_nested_in_its_spec_and_round_trips():
    from qkdyn.empirical.coupled.study import CoupledRun, CoupledStudy

    spec = next(s for s in CoupledStudy().plan("quick") if s.params.get("kind") == "train")
    assert isinstance(spec.params["train"], dict) and isinstance(spec.params["attention"], dict)
    assert not any("." in key for key in spec.params)
    run = CoupledRun.from_config(spec.params)
    assert run.to_config() == spec.params and run.name == spec.name


def test_defaults_are_grouped_by_budget():
    assert by_budget({"quick": "250", "cpu": "1200", "gpu": "1200", "paper": "1200"}) == \
        "250 at quick; 1200 at cpu, gpu and paper"
    assert by_budget(dict.fromkeys(BUDGETS, "5")) == "5 at every budget"
    assert grouped({"a": "1", "b": "2", "c": "1"}, "for") == "1 for a and c; 2 for b"
    assert [shown(v) for v in ((0.2, 1.0), (), "", None, 3e-3, True)] == ["0.2,1", '""', '""', "none", "0.003", "True"]


def _help(command: str) -> str:
    """The command's help without white space (argparse wraps lines at spaces and hyphens)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return _squeezed(sub.choices[command].format_help())


def _squeezed(text: str) -> str:
    return "".join(text.split())


def _flags(cls):
    from qkdyn.configflags import flag_of

    return [(field.name, flag_of(field)) for field in dataclasses.fields(cls) if KEY in field.metadata]


def _coupled():
    from qkdyn.empirical.coupled.study import BUDGETS as COUPLED
    from qkdyn.empirical.coupled.study import StudyConfig

    return "compare-coupled", StudyConfig, functools.partial(budget_defaults, COUPLED)


def _fixed_attention():
    from qkdyn.empirical.synthetic.budgets import FIXED_ATTENTION, FixedAttentionConfig

    return "fixed-attention", FixedAttentionConfig, functools.partial(budget_defaults, FIXED_ATTENTION)


def _circuits():
    from qkdyn.empirical.circuits.study import CircuitsConfig

    from qkdyn.commands.circuits_flags import budget_text

    return "compare-circuits", CircuitsConfig, budget_text


@pytest.mark.parametrize("command", [_coupled, _fixed_attention, _circuits])
def test_study_command_help_shows_each_budgets_default_of_every_flag(command):
    name, cls, text = command()
    help_text = _help(name)
    assert _squeezed("set by --budget") not in help_text
    for field, flag in _flags(cls):
        expected = _squeezed(f"(default: {text(field)})")
        assert expected in help_text, f"{name} {flag}: {expected} not in its help"


def test_the_help_follows_the_budget_instances(monkeypatch):
    """The help is generated from the budgets: a changed budget instance changes it."""
    from qkdyn.empirical.synthetic import budgets

    assert _squeezed("250 at quick; 1200 at cpu, gpu and paper") in _help("fixed-attention")
    changed = {**budgets.FIXED_ATTENTION, "quick": dataclasses.replace(budgets.FIXED_ATTENTION["quick"], steps=31)}
    monkeypatch.setattr(budgets, "FIXED_ATTENTION", changed)
    monkeypatch.setattr("qkdyn.commands.fixed_attention.FIXED_ATTENTION", changed)
    assert _squeezed("31 at quick; 1200 at cpu, gpu and paper") in _help("fixed-attention")


def test_circuits_help_names_each_tasks_target_where_tasks_differ():
    from qkdyn.empirical.circuits.study import TARGET_LOSS

    text = _help("compare-circuits")
    assert all(_squeezed(f"{shown(target)} for {task}") in text for task, target in TARGET_LOSS.items())
    assert _squeezed("(default: 0,1 at quick; 0,1,2,3,4 at cpu and gpu;") in text


def test_a_flag_overrides_its_budgets_value_and_the_rest_stay(tmp_path):
    from qkdyn.empirical.coupled.study import BUDGETS as COUPLED

    from qkdyn.commands.compare_coupled import study_of

    args = build_parser().parse_args(["compare-coupled", "--budget", "quick", "--lm-steps", "7"])
    assert study_of(args).config("quick") == dataclasses.replace(COUPLED["quick"], lm_steps=7)


@pytest.mark.parametrize("command", ["train-circuits", "compare-circuits"])
def test_circuits_run_flags_show_each_presets_value(command):
    """The RunConfig flags default to the preset's value: the help names it for every preset."""
    from qkdyn.empirical.circuits.presets import PRESETS, RunConfig

    from qkdyn.commands.circuits_flags import COMPARE_OWNED, preset_text

    help_text = _help(command)
    skip = {"task", *(COMPARE_OWNED if command == "compare-circuits" else ())}
    for field, flag in _flags(RunConfig):
        if field not in skip:
            assert _squeezed(f"(default: {preset_text(field)})") in help_text, f"{command} {flag}"
    assert preset_text("d_model").startswith("300 in paper-squad,") and "16 in tiny" in preset_text("d_model")
    assert preset_text("readout") == "last in every preset" and all("readout" not in p for p in PRESETS.values())
