"""Stress test of the growth-law checks of ``qkdyn.testing``: no derived law fails, no wrong law passes.

    python -m benchmarks.stress_growth [--draws 2000] [--wide-draws 500] [--defaults-draws 300] [--seed 0] [--out PATH]

Not part of the test suite (minutes of CPU; ``python -m benchmarks`` runs only ``bench_*``). It draws
(setting, rho, form) with qkdyn.testing's strategies as the documented property test does (docs/api.md:
``setting_strategy(classes=(2, 6), scale=(0.5, 2.0))``, ``rhos(min_value=1, max_value=100)``, every form and
``paper``), solves each draw to t = 1e300 and runs ``check_growth`` on the documented window 1e100-1e300 for

* every law ``qkdyn.derive(form).growth`` prints (a true law: it must never fail), and
* every wrong law of each reading: the laws the docs, examples and tests name as wrong, the other forms'
  laws and the rival orders, wherever their leading order differs from the derived law's (a wrong law
  must never pass).

Each check's outcome is one of holds / cannot distinguish / fails / in transit (``testing.verdict``: a law holds
when every criterion passes, fails when one fails; in transit where the trajectory has not reached the regime the
laws are stated for on the window, ``testing.regime_criterion``, whatever the law's criteria found on their own,
which the tables count beside it). For information it also checks the derived laws as docs/api.md showed them
before (trajectory to 1e60, window 1e30-1e60), and the same checks with scale down to 0.3 (the strategy's
default, with two slowly converging CAFO settings earlier runs drew) and on the strategies' library
defaults (``setting_strategy()``, ``rhos()``: rho down to 0.01). The
result is written to ``benchmarks/STRESS_GROWTH.md``; the exit status is 1 where, on the documented
strategy, a derived law fails or a wrong law holds.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time
from pathlib import Path

import hypothesis
import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from qkdyn.simulate.growth import RIVALS, Law, local_exponent

import qkdyn
from qkdyn import testing

OUT = Path(__file__).with_name("STRESS_GROWTH.md")
T_MAX, POINTS, WINDOW = 1e300, 300, (1e100, 1e300)  # the documented call
OLD_T_MAX, OLD_POINTS, OLD_WINDOW = 1e60, 200, (1e30, 1e60)  # the call docs/api.md showed before
READINGS = ("ov", "exp(qk)", "odds", "qk")
#: each outcome of testing.verdict as the tables name it
OUTCOMES = {testing.PASSED: "holds", testing.INDISTINCT: "cannot distinguish", testing.FAILED: "fails",
            testing.IN_TRANSIT: "in transit"}

#: wrong laws the docs, examples and tests name (docs/api.md's failure message, the notebook's
#: "e^qk ~ (log t)^2", tests/qkdyn/test_testing.py's WRONG_LAWS); each is wrong where its order is not the form's
NAMED_WRONG: dict[str, list[str | float]] = {
    "ov": ["(log t)^2", "log log t"],
    "qk": ["log t"],
    "exp(qk)": ["log t", "(log t)^2", 2.0],
    "odds": ["(log t)^2 log log t", "log t log log t", "log t", "(log t)^2"],
}


def leading(law: str | float) -> tuple[float, float, float]:
    return Law.log_power(law).leading if isinstance(law, float) else Law.parse(law).leading


def wrong_laws(laws: dict[str, dict[str, str]], form: str, reading: str) -> list[str | float]:
    """The claims to try that are wrong for ``form`` (``laws``: each form's derived laws): named, other forms'
    and rival laws of another leading order."""
    right = leading(laws[form][reading])
    candidates: list[str | float] = [*NAMED_WRONG[reading], *(laws[other][reading] for other in qkdyn.PARAMS),
                                     *map(str, RIVALS)]
    chosen: dict[str, str | float] = {}
    for law in candidates:
        name = str(Law.parse(law)) if isinstance(law, str) else f"exponent {law:g}"
        if leading(law) != right:
            chosen.setdefault(name, law)
    return list(chosen.values())


def outcome(criteria: list[testing.Criterion]) -> str:
    return OUTCOMES[testing.verdict(criteria)]


def own_outcome(criteria: list[testing.Criterion]) -> str:
    """The outcome the law's criteria found on their own, the precondition aside (what a check in transit would
    have said without it)."""
    return OUTCOMES[testing.verdict([dataclasses.replace(c, outcome=c.own_outcome or c.outcome)
                                     for c in criteria if c.name != "regime"])]


def describe(form: str, setting: qkdyn.Setting) -> str:
    s = setting
    return (f"{form} K={s.classes} D={s.distinct} N={s.commons} m={s.m} n={s.n} scale={s.scale:.3g} "
            f"eta_qk={s.eta_qk:.3g} eta_ov={s.eta_ov:.3g} (rho={s.rho:.3g}) qk0={s.qk0:.3g} ov0={s.ov0:.3g}")


def note(examples: list[str], example: str) -> None:
    """Keep the first 5 distinct examples (hypothesis draws a setting again with small changes)."""
    if example not in examples and len(examples) < 5:
        examples.append(example)


def count(counts: collections.Counter, criteria: list[testing.Criterion]) -> str:
    """Count a check's outcome in ``counts`` (and, in transit, what the law's criteria found on their own, as
    "in transit, <outcome> on its own"); return the outcome."""
    got = outcome(criteria)
    counts[got] += 1
    if got == "in transit":
        counts[f"in transit, {own_outcome(criteria)} on its own"] += 1
    return got


def stress(strategy, rho_strategy, draws: int, seed_value: int, old_window: bool) -> dict:
    """Outcome counts over ``draws`` hypothesis draws: true laws (documented and, if asked, old window) and
    wrong laws, per (form, reading), with up to 5 examples of each outcome that must not happen and of the
    checks in transit whose law failed (true laws) or held (wrong laws) on its own, with their regime measured."""
    counts: dict = collections.defaultdict(collections.Counter)
    bad: dict = collections.defaultdict(list)
    laws = {form: qkdyn.derive(form).growth for form in qkdyn.PARAMS}
    wrong = {(form, reading): wrong_laws(laws, form, reading) for form in qkdyn.PARAMS for reading in READINGS}

    @seed(seed_value)
    @settings(max_examples=draws, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(setting=strategy, rho=rho_strategy, form=testing.params(include_paper=True))
    def run(setting, rho, form):
        setting = setting.replace(eta_qk=rho * setting.eta_ov)
        counts["draws"][form] += 1
        tr = qkdyn.solve(setting, form, t_max=T_MAX, points=POINTS)
        old = qkdyn.solve(setting, form, t_max=OLD_T_MAX, points=OLD_POINTS) if old_window else None
        for reading in READINGS:
            criteria = testing.check_growth(tr, reading, laws[form][reading], window=WINDOW)
            got = count(counts["true", form, reading], criteria)
            if got == "fails":
                note(bad["true"], f"{describe(form, setting)}: {reading} ~ {laws[form][reading]}")
            if got == "in transit" and own_outcome(criteria) == "fails":
                note(bad["true transit"], f"{describe(form, setting)}: {reading} ~ {laws[form][reading]}: "
                                          f"{criteria[0].measured}")
            if old is not None:
                count(counts["old", form, reading], testing.check_growth(old, reading, laws[form][reading],
                                                                         window=OLD_WINDOW))
            for law in wrong[form, reading]:
                criteria = testing.check_growth(tr, reading, law, window=WINDOW)
                got = count(counts["wrong", form, reading], criteria)
                if got == "holds":
                    note(bad["wrong"], f"{describe(form, setting)}: {reading} ~ {law}")
                if got == "in transit" and own_outcome(criteria) == "holds":
                    note(bad["wrong transit"], f"{describe(form, setting)}: {reading} ~ {law}: "
                                               f"{criteria[0].measured}")

    run()
    return {"counts": counts, "bad": bad, "wrong": wrong, "laws": laws}


def table(result: dict, kind: str) -> list[str]:
    counts = result["counts"]
    if kind == "wrong":
        head = ["| form | reading | wrong laws tried | checks | fails | cannot distinguish | holds (must be 0) | "
                f"{TRANSIT_HEAD} |", "|---|---|---|---:|---:|---:|---:|---:|"]
    else:
        head = ["| form | reading | derived law | draws | holds | cannot distinguish | fails | "
                f"{TRANSIT_HEAD} |", "|---|---|---|---:|---:|---:|---:|---:|"]
    rows = []
    for form in qkdyn.PARAMS:
        for reading in READINGS:
            c = counts[kind, form, reading]
            if kind == "wrong":
                tried = ", ".join(f"`{law}`" if isinstance(law, str) else f"exponent {law:g}"
                                  for law in result["wrong"][form, reading])
                rows.append(f"| {form} | {reading} | {tried} | {checks(c)} | {c['fails']} | "
                            f"{c['cannot distinguish']} | {c['holds']} | {transit(c)} |")
            else:
                rows.append(f"| {form} | {reading} | `{result['laws'][form][reading]}` | {checks(c)} | "
                            f"{c['holds']} | {c['cannot distinguish']} | {c['fails']} | {transit(c)} |")
    return head + rows


def checks(counts: collections.Counter) -> int:
    return sum(counts[name] for name in OUTCOMES.values())


#: the last column of the tables: checks in transit, and what the law's criteria found on their own
TRANSIT_HEAD = "in transit (on its own: holds / cannot distinguish / fails)"


def transit(counts: collections.Counter) -> str:
    alone = " / ".join(str(counts[f"in transit, {name} on its own"]) for name in ("holds", "cannot distinguish",
                                                                                  "fails"))
    return f"{counts['in transit']} ({alone})"


def totals(result: dict, kind: str) -> collections.Counter:
    return sum((c for key, c in result["counts"].items() if key[0] == kind), collections.Counter())


def summary(result: dict) -> str:
    true, wrong = totals(result, "true"), totals(result, "wrong")
    return (f"Totals: derived laws {true['holds']} hold, {true['cannot distinguish']} cannot distinguish, "
            f"{true['fails']} fail, {transit(true)} in transit; wrong laws {wrong['fails']} fail, "
            f"{wrong['cannot distinguish']} cannot distinguish, {wrong['holds']} hold, {transit(wrong)} in transit "
            f"(in parentheses: {TRANSIT_HEAD.removeprefix('in transit (')}.")


def examples(result: dict) -> list[str]:
    lines = []
    for kind, what in (("true", "derived laws that fail"), ("wrong", "wrong laws that hold"),
                       ("true transit", "derived laws in transit that failed on their own, with the regime measured"),
                       ("wrong transit", "wrong laws in transit that held on their own, with the regime measured")):
        if result["bad"][kind]:
            lines += ["", f"First {what}:", "", *(f"- {line}" for line in result["bad"][kind])]
    return lines


def drawn(result: dict) -> str:
    draws = result["counts"]["draws"]
    return f"{sum(draws.values())} draws ({', '.join(f'{form} {draws[form]}' for form in qkdyn.PARAMS)})"


#: slowly converging CAFO settings (scale near 0.3, K = 2) that earlier runs drew
SLOW = [qkdyn.Setting(classes=2, distinct=14, commons=20, m=8, n=28, scale=0.3, eta_qk=1.34, eta_ov=1.16, qk0=0.146,
                      ov0=0.267),
        qkdyn.Setting(classes=2, distinct=20, commons=24, m=4, n=10, scale=0.315, eta_qk=5.07, eta_ov=5.07, qk0=0.0051,
                      ov0=0.001)]


def slow_settings() -> list[str]:
    lines = ["| setting | g | local exponent at t = 1e100, 1e200, 1e300 | odds ~ log t | odds ~ log t log log t |",
             "|---|---:|---|---|---|"]
    for setting in SLOW:
        s = setting
        g = 2 * s.distinct**0.5 * s.classes * s.commons * s.eta_ov / (
            s.eta_qk * s.scale**2 * (s.classes - 1) * (s.distinct * s.classes + s.commons))
        tr = qkdyn.solve(setting, "CAFO", t_max=T_MAX, points=POINTS)
        late = tr.t >= 1e90
        exponent = local_exponent(tr.t[late], tr.log_odds[late])
        at = [float(exponent[np.argmin(np.abs(np.log10(tr.t[late]) - d))]) for d in (100, 200, 300)]
        verdicts = [outcome(testing.check_growth(tr, "odds", law, window=WINDOW))
                    for law in ("log t", "log t log log t")]
        lines.append(f"| {describe('CAFO', setting)} | {g:.0f} | {', '.join(f'{e:.3f}' for e in at)} | "
                     f"{verdicts[0]} | {verdicts[1]} |")
    return lines


def report(sections: dict, args, seconds: float) -> str:
    documented, wide, defaults = sections["documented"], sections["wide"], sections["defaults"]
    lines = [
        "# Growth-law checks under stress",
        "",
        f"Written by `python -m benchmarks.stress_growth --draws {args.draws} --wide-draws {args.wide_draws} "
        f"--defaults-draws {args.defaults_draws} --seed {args.seed}` (do not edit by hand): {seconds:.0f} s of one "
        f"core. Each draw (setting, rho, form) comes from qkdyn.testing's strategies through hypothesis "
        f"{hypothesis.__version__} (generation only, seed {args.seed}: the same draws again with this version, others "
        f"with another); every form and `paper`; solved to t = 1e300 (300 points) and checked on the "
        "documented window 1e100-1e300 by `testing.check_growth` with its defaults (rel 0.05, resolution 3, "
        "extend). Outcomes (`testing.verdict`): *holds* (every criterion passes), *cannot distinguish* (none fails, "
        "but the window cannot tell the law from a rival of another order: `assert_grows_like` skips the test or "
        "rejects the draw), *fails*, *in transit* (the laws' precondition `regime` does not hold on the window: the "
        "margin the attention leaves unused, (1 - attn) ov, moves by more than rel = 0.05 times ov's own change there, "
        "`testing.regime_criterion`; the law is not judged, whatever its criteria found on their own, which the "
        "last column counts in parentheses; `assert_grows_like` skips or rejects as for *cannot distinguish*). Wrong laws: for each reading, the wrong laws the docs, examples and tests name, the "
        "other forms' laws and the rival orders, wherever their leading order is not the form's.",
        "",
        f"## The documented property test: {drawn(documented)}",
        "",
        "`setting_strategy(classes=(2, 6), scale=(0.5, 2.0))`, `rhos(min_value=1, max_value=100)` (docs/api.md; "
        "the range the laws are stated for, as in tests/qkdyn/test_testing.py).",
        "",
        "Every law `qkdyn.derive(form).growth` prints:",
        "",
        *table(documented, "true"),
        "",
        "Every wrong law, same trajectories and window:",
        "",
        *table(documented, "wrong"),
        "",
        "For comparison, the derived laws as docs/api.md showed them before (trajectory to 1e60, window "
        "1e30-1e60, so nothing to extend to), on the same draws:",
        "",
        *table(documented, "old"),
        "",
        summary(documented),
        *examples(documented),
        "",
        f"## Scale down to 0.3: {drawn(wide)} (information)",
        "",
        "`setting_strategy(classes=(2, 6))` (scale in [0.3, 2], the strategy's default), `rhos(min_value=1, "
        "max_value=100)`. With scale near 0.3 and K = 2, CAFO's margin carries a factor e^g, g = 2 sqrt(D) K N "
        "eta_OV / (eta_QK s^2 (K - 1) (D K + N)) (its derived law, `qkdyn derive CAFO`), and its odds can still be "
        "converging at t = 1e300. Settings earlier runs of this script drew, checked again (odds ~ log t on "
        "1e100-1e300; the odds' local exponent d log odds / d log log t, whose limit is 1):",
        "",
        *slow_settings(),
        "",
        *table(wide, "true"),
        "",
        *table(wide, "wrong"),
        "",
        summary(wide),
        *examples(wide),
        "",
        f"## The strategies' library defaults: {drawn(defaults)} (information)",
        "",
        "`setting_strategy()`, `rhos()` (rho in [0.01, 100]). The laws are asymptotic: for rho well below 1 some "
        "trajectories are still in transit at t = 1e300 (the attention far from its limit, the unused margin still "
        "moving), and there the data on 1e100-1e300 can follow a rival's shape: those checks are *in transit*.",
        "",
        *table(defaults, "true"),
        "",
        *table(defaults, "wrong"),
        "",
        summary(defaults),
        *examples(defaults),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=2000, help="draws of the documented strategy")
    parser.add_argument("--wide-draws", type=int, default=500, help="draws with scale down to 0.3")
    parser.add_argument("--defaults-draws", type=int, default=300, help="draws of the library defaults")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    start = time.process_time()
    documented_rho = testing.rhos(min_value=1, max_value=100)
    sections = {
        "documented": stress(testing.setting_strategy(classes=(2, 6), scale=(0.5, 2.0)), documented_rho,
                             args.draws, args.seed, old_window=True),
        "wide": stress(testing.setting_strategy(classes=(2, 6)), documented_rho, args.wide_draws, args.seed,
                       old_window=False),
        "defaults": stress(testing.setting_strategy(), testing.rhos(), args.defaults_draws, args.seed,
                           old_window=False),
    }
    text = report(sections, args, time.process_time() - start)
    args.out.write_text(text)
    print(text)
    documented = sections["documented"]
    return 1 if totals(documented, "true")["fails"] or totals(documented, "wrong")["holds"] else 0


if __name__ == "__main__":
    sys.exit(main())
