"""What every claim of one analysis of paper B's study shares: the runs and their selections, the
corpora and count models, the scope, standard attention's preconditions, the paired
coupled-vs-standard design, and the f precondition with its reference effect
(:mod:`qkdyn.empirical.coupled.preconditions`)."""
from __future__ import annotations

from collections import Counter

from qkdyn.empirical.coupled.paper_effects import SMALLEST
from qkdyn.empirical.coupled.preconditions import (
    below_bigram,
    count_entry,
    lm_preconditions,
    mechanism_precondition,
    mechanism_reference,
)
from qkdyn.empirical.coupled.selection import Runs, paired

from qkdyn.claims import Precondition
from qkdyn.stats import compare


def scope_of(runs: list[dict]) -> str:
    """What the verdicts can speak for: the models and tokens of these runs, not the paper's scale."""
    lm = [r for r in runs if r["task"] == "lm"]
    if not lm:
        return ""
    params = sorted({r["parameters"] for r in lm})
    tokens = Counter(r["tokens"] for r in lm).most_common(1)[0][0]
    return (f"Scope: `{lm[0]['preset']}` models ({params[0]:,}-{params[-1]:,} parameters) trained on {tokens:,} tokens "
            "per run; this speaks for that scale only, not for the paper's 60M-350M models trained to convergence.")


class Context:
    """The shared state of one analysis (module docstring); ``design`` is coupled Euler vs standard
    attention at equal tokens, paired by seed, whose power sets the f precondition's reference."""

    def __init__(self, runs: list[dict], coherent: str, heterogeneous: str, count_models: dict):
        self.R = Runs(runs)
        self.coherent, self.heterogeneous, self.count_models = coherent, heterogeneous, count_models
        self.scope = scope_of(runs)
        self.std, self.cpl = self.R.get(coherent, "standard"), self.R.get(coherent, "coupled-euler")
        self.learnt = lm_preconditions(self.std, coherent, count_models)
        self.design = (compare(*paired(self.cpl, self.std), "decrease", smallest_effect=SMALLEST["standard"])
                       if self.std and self.cpl else None)
        self.reference = mechanism_reference(self.design)
        self.acts = [mechanism_precondition(self.cpl, "coupled Euler", *self.reference)] if self.cpl else []

    def works(self, group: dict[int, dict], label: str, corpus: str | None = None,
              standard: dict[int, dict] | None = None) -> Precondition:
        """The compared variant ``label`` (runs ``group``) beats the bigram count model of ``corpus``
        (default: the coherent one) in the tokens of ``standard`` (default: the main grid's standard runs)."""
        corpus = corpus or self.coherent
        standard = standard if standard is not None else self.R.get(corpus, "standard")
        return below_bigram(group, label, corpus, count_entry(corpus, self.count_models, standard))
