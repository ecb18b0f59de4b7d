"""Validity before verdict for paper B's claims: what each claim needs, measured in its own runs
(:class:`qkdyn.claims.Precondition`; any unmet makes the claim ``inconclusive``, printed first).

* **Standard attention has learnt** (every language-modelling claim): its validation perplexity, worst
  seed, below the unigram and the bigram count models of the same training split
  (:mod:`qkdyn.empirical.coupled.count_models`), and removing its attention (same checkpoint) raises its
  validation loss by more than :data:`~qkdyn.empirical.coupled.paper_effects.ATTENTION_FLOOR` nats,
  worst seed.
* **Every compared variant works**: its perplexity, worst seed, below the bigram count model
  (:func:`below_bigram`): a variant that has not beaten counting says nothing about attention.
* **The coupling acts at the size of the claim** (B2, B3, B4, B5, B8; :func:`mechanism_precondition`):
  removing f from the trained coupled model raises its validation loss by more than the effect the
  claim is about, r = min(the paper's headline effect, the smallest effect the study's paired
  coupled-vs-standard design detects with 80% power): the lower end of the f-ablation's 95% interval
  over seeds must exceed r. (The seed noise of log perplexity is no yardstick: a same-checkpoint
  ablation has none of it, and an ablation far above the noise can still be far below the claim.)
* **Differential Attention works** (B7's premise, :func:`diff_premise`): at its best learning rate its
  perplexity reaches standard attention's: the upper end of the 95% interval of log ppl(diff) - log
  ppl(standard), paired by seed, below :data:`~qkdyn.empirical.coupled.paper_effects.SAME_MARGIN`.
* **MQAR recall learnt** (B9): standard attention's recall, worst seed, above :func:`recall_floor`.
"""
from __future__ import annotations

import math

from qkdyn.empirical.coupled.count_models import key as count_key
from qkdyn.empirical.coupled.paper_effects import ATTENTION_FLOOR, HEADLINE, SAME_MARGIN
from qkdyn.empirical.coupled.selection import ablation_change, paired, worst

from qkdyn.claims import Precondition
from qkdyn.stats import Comparison, compare

#: the share of the queries guessing misses that standard attention must recall before MQAR is judged
RECALL_SHARE = 0.5


def count_entry(corpus: str, count_models: dict, standard: dict[int, dict]) -> dict | None:
    """The count models of ``corpus`` in the tokens of its ``standard`` runs (any tokens when there are none)."""
    entry = next((v for k, v in count_models.items() if k.startswith(f"{corpus}|")), None)
    if standard:
        run = next(iter(standard.values()))
        entry = count_models.get(count_key(corpus, run.get("tokenizer", "bpe"), run["model"]["vocab_size"]), entry)
    return entry


def lm_preconditions(standard: dict[int, dict], corpus: str, count_models: dict) -> list[Precondition]:
    """Standard attention (its runs ``standard``) has learnt on ``corpus``: below both count models, and it
    uses attention."""
    highest = worst(r["final"]["val_ppl"] for r in standard.values())
    entry = count_entry(corpus, count_models, standard)
    fitted = "count model of the same training split" if entry else "count model not computed"
    cost = worst((ablation_change(r, "attention") for r in standard.values()), largest=False)
    return [
        Precondition(f"{corpus}: standard ppl below the unigram model", highest, "<",
                     entry["unigram_ppl"] if entry else math.nan, f"worst seed; add-one {fitted}"),
        Precondition(f"{corpus}: standard ppl below the bigram model", highest, "<",
                     entry["bigram_ppl"] if entry else math.nan, f"worst seed; interpolated absolute-discount {fitted}"),
        Precondition(f"{corpus}: removing attention costs standard > {ATTENTION_FLOOR:.3g} nats", cost, ">",
                     ATTENTION_FLOOR, "worst seed, same checkpoint, whole validation split"),
    ]


def below_bigram(group: dict[int, dict], label: str, corpus: str, entry: dict | None) -> Precondition:
    """The compared variant ``label`` (its runs ``group``) beats the bigram count model of ``corpus``."""
    return Precondition(f"{corpus}: {label} ppl below the bigram model", worst(r["final"]["val_ppl"] for r in group.values()),
                        "<", entry["bigram_ppl"] if entry else math.nan,
                        f"worst of {len(group)} seeds; " + ("bigram count model of the same training split" if entry
                                                          else "count model not computed"))


def mechanism_reference(design: Comparison | None) -> tuple[float, str]:
    """The effect a mechanism claim is about: min(:data:`HEADLINE`, the smallest effect the paired
    coupled-vs-standard ``design`` detects with 80% power; the headline alone where that is unknown),
    with its description."""
    mde = design.mde if design is not None else math.nan
    if math.isnan(mde) or mde >= HEADLINE:
        because = "" if math.isnan(mde) else f" (the paired design detects only >= {mde:.3g})"
        return HEADLINE, f"the paper's headline effect {HEADLINE:.3g} in log ppl{because}"
    return mde, (f"the {mde:.3g} in log ppl the paired coupled-vs-standard design detects with 80% power "
                 f"(below the paper's headline {HEADLINE:.3g})")


def mechanism_precondition(group: dict[int, dict], label: str, reference: float, reference_text: str) -> Precondition:
    """Removing f changes the trained model by more than the effect the claim is about (module docstring):
    the lower end of the 95% interval over seeds of the f-ablation's change of validation loss above
    ``reference``."""
    changes = [ablation_change(r, "field") for r in group.values()]
    c = compare(changes, [0.0] * len(changes), "increase")
    return Precondition(f"{label}: removing f changes the model by more than the effect the claim is about",
                        c.interval[0], ">", reference,
                        f"lower end of the 95% CI over {c.n} seeds of the f-ablation's change of validation loss "
                        f"(mean {c.effect:+.4g} nats) vs {reference_text}")


def diff_premise(diff: dict[int, dict], standard: dict[int, dict], lr_text: str) -> Precondition:
    """B7's premise: Differential Attention (``diff``, at its best learning rate) reaches standard
    attention's perplexity: the upper end of the 95% interval of log ppl(diff) - log ppl(standard),
    paired by seed, below :data:`SAME_MARGIN`."""
    c = compare(*paired(diff, standard), "decrease")
    return Precondition("Differential Attention reaches standard attention's perplexity", c.interval[1], "<",
                        SAME_MARGIN, f"upper end of the 95% CI of log ppl(diff) - log ppl(standard), paired over {c.n} "
                        f"seeds (mean {c.effect:+.4g}), vs the same-perplexity margin (half the paper's headline gain); "
                        f"{lr_text}")


def recall_floor(guessing: float) -> float:
    """The MQAR precondition's floor: g + RECALL_SHARE (1 - g), halfway from guessing to full recall
    (a model just above guessing, e.g. 0.28 against 0.25, has not learnt recall)."""
    return guessing + RECALL_SHARE * (1 - guessing)


def guessing_rate(run: dict) -> float:
    """Recall of guessing one in-context value: mean over the task's settings of 1 / kv pairs."""
    rates = [1 / int(k.split("_kv")[1]) for k in run["final"] if k.startswith("acc_T") and "_kv" in k]
    return sum(rates) / len(rates) if rates else math.nan
