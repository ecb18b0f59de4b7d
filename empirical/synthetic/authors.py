"""The ``authors`` sampled generator: Paper A's synthetic task as the authors' notebooks run it.

Source: notebooks ``Fig2-Heatmaps/Fig-2_CACO_FAFO Experiments.ipynb`` and ``Fig-2-Heatmaps-Row-1.ipynb``
of github.com/vashishtrahul/Faster-Query-Key-Learning-Sharpens-Attention-in-Self-Attention-Models.

Vocabulary of V = 50 one-hot ids:
* ids 0-9 are the *common* tokens (weight 1 each in every class);
* class k (k = 0..3) owns the distinct ids 10(k+1) .. 10(k+1)+9 with weights 0.1, 0.2, ..., 1.0;
* the query token is class-specific, id 5 + k, and the label (next token) is id 1 + k: both lie
  inside the common range, so the query's own id also occurs among the context's common tokens.
A sequence: ``seq_len - 2`` context ids drawn i.i.d. from class k's normalised weights, then the query,
then the label. The model reads context + query (the query attends to itself and to every copy of its
id), scores ``s W_QK[q, x]`` with s = 1/sqrt(50), and outputs logits over **all 50 ids**
(cross-entropy over V logits: log 50 at zero init). Attention on distinct tokens is the mass on ids > 9.

Recipes (``RECIPES``; the notebook of each line in brackets):
* sequence length 128 for CACO [Fig-2 CACO cells], 64 for the other forms [Row-1, Fig-2 FAFO cells];
* inits: CACO from PyTorch's default ``nn.Linear`` init (seeded with torch.manual_seed(seed), layers
  created in the notebook's order); FACO, CAFO all factors 1e-6 I [Row-1]; FAFO 1e-6 I for the faster
  schedules [Fig-2], but at equal rates its Q and K keep the default init (their identity lines are
  commented out) [Row-1] -- so FAFO's equal-vs-faster comparison also changes the QK init;
* rates (SGD, batch 32): 1e-2 everywhere at equal rates; QK 20x for a factorized QK (FAFO: 0.2 vs 0.01),
  5x for a collapsed QK (CACO: 0.05 vs 0.01); ramps 1 -> 40x (factorized QK) and 1 -> 10x (collapsed)
  linear over the arm's whole horizon. FACO and CAFO have no faster-QK notebook: they take the factor
  of their QK form.
* horizons, per arm (:data:`NOTEBOOK_HORIZONS`, each entry citing its notebook cell: epochs x batches
  per epoch): FAFO and FACO equal 625k steps, CAFO equal 1M, CACO equal 500k [Row-1]; FAFO 20x 100k,
  FAFO ramp, CACO 5x and CACO ramp 200k [Fig-2]. An arm without a notebook takes the horizon of the
  notebook arm with the same QK form and schedule (FACO as FAFO, CAFO as CACO; ``qk20`` as ``qkfast``).
* test: 6400 samples (200 batches of 32); seeds 1234.. (5 for FAFO/CACO in Fig-2).
* one schedule beyond the notebooks, ``qk20`` (QK 20x for every form, so also for CACO): where the
  query-id shortcut was seen; for factorized QK it equals ``qkfast``.

What this module does differently (and why): every arm's notebook horizon N (steps at 1e-2) is
compressed by one factor c to ``round(N / c)`` steps at ``1e-2 c`` (the same gradient-flow time per arm,
and one learning-rate base for every arm, as theirs); the data stream is
seeded (``torch.Generator``), not numpy's global state; the stopping rule is the correct running mean
(:mod:`.sampled`) instead of their accumulator (a loss summed since the last print, every 100 epochs,
divided by the batches of one epoch, so it fires late or never). Tensors are float32, as theirs.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from qkdyn.empirical.synthetic.model import head, log_counts
from qkdyn.empirical.synthetic.sampled import Batch, Factors, Task
from qkdyn.theory.setting import factorized
from torch import nn

VOCAB = 50
CLASSES = 4
COMMON = np.arange(10)
QUERY_IDS = (5, 6, 7, 8)
LABEL_IDS = (1, 2, 3, 4)
SCALE = 1 / math.sqrt(VOCAB)
SEQ_LEN = {"CACO": 128, "FACO": 64, "CAFO": 64, "FAFO": 64}
NOTEBOOK_LR = 1e-2
ROW1, FIG2 = "Fig2-Heatmaps/Fig-2-Heatmaps-Row-1.ipynb", "Fig2-Heatmaps/Fig-2_CACO_FAFO Experiments.ipynb"
#: (form, schedule) -> (SGD steps = n_epochs x n_batches, notebook, code cell index) as the notebooks run them
NOTEBOOK_HORIZONS = {
    ("FAFO", "equal"): (2500 * 250, ROW1, 5),  # "## FAFO": Net_p1, lr 1e-2
    ("FACO", "equal"): (2500 * 250, ROW1, 26),  # "## FACO": Net_p2
    ("CAFO", "equal"): (5000 * 200, ROW1, 53),  # "## CAFO": Net_p3
    ("CACO", "equal"): (2500 * 200, ROW1, 65),  # "## CACO": Net_p4
    ("FAFO", "qkfast"): (1000 * 100, FIG2, 3),  # Q, K at 2e-1, V, O at 1e-2
    ("FAFO", "ramp"): (2000 * 100, FIG2, 14),  # "# increasing lr": LambdaLR 1 -> 40 on Q, K
    ("CACO", "qkfast"): (2000 * 100, FIG2, 21),  # "### Increased Learning Rate": key_layer 0.05
    ("CACO", "ramp"): (2000 * 100, FIG2, 28),  # LambdaLR 1 -> 10 on key_layer
}
QK_FAST = {False: 5.0, True: 20.0}  # by whether the QK circuit is factorized
RAMP_END = {False: 10.0, True: 40.0}
IDENTITY = 1e-6
#: the logit rows of the OV circuit: all V ids (:data:`.model.Rows` None)
EVERY_ROW = None
#: the notebooks' schedules, and qk20 (QK 20x for every form: the probe of the query-id shortcut)
SCHEDULES = ("equal", "qkfast", "ramp", "qk20")


def distinct_ids(k: int) -> np.ndarray:
    return np.arange(10 * (k + 1), 10 * (k + 2))


def token_probabilities() -> np.ndarray:
    """(K, V): the notebooks' seq_class rows."""
    probs = np.zeros((CLASSES, VOCAB))
    for k in range(CLASSES):
        probs[k, COMMON] = 1.0
        probs[k, distinct_ids(k)] = np.arange(1, 11) / 10
    return probs / probs.sum(axis=1, keepdims=True)


def sample(param: str, size: int, generator: torch.Generator) -> Batch:
    """``size`` sequences of form ``param``'s length as count vectors over context + query."""
    context = SEQ_LEN[param] - 2
    cls = torch.randint(CLASSES, (size,), generator=generator)
    probs = torch.as_tensor(token_probabilities(), dtype=torch.float32)[cls]
    tokens = torch.multinomial(probs, context, replacement=True, generator=generator)
    query = torch.as_tensor(QUERY_IDS)[cls]
    counts = torch.zeros(size, VOCAB)
    counts.scatter_add_(1, torch.cat([tokens, query[:, None]], dim=1), torch.ones(size, context + 1))
    distinct = torch.zeros(size, VOCAB, dtype=torch.bool)
    distinct[:, 10:] = torch.as_tensor(np.concatenate([np.full(10, k) for k in range(CLASSES)]))[None] == cls[:, None]
    return Batch(counts, query, torch.as_tensor(LABEL_IDS)[cls], cls, distinct)


class AuthorsHead(nn.Module):
    """Their one-head model on one-hot ids, with ``nn.Linear`` layers named as in the notebooks.

    score(x) = s <query_layer(e_q), key_layer(e_x)> (collapsed QK: s key_layer(e_x)[q]),
    logits = prediction_layer(value_layer(sum_x attn_x e_x)) (collapsed OV: no value_layer).
    """

    def __init__(self, param: str):
        super().__init__()
        self.param = param
        linear = lambda: nn.Linear(VOCAB, VOCAB, bias=False)  # noqa: E731
        if param == "CACO":  # creation order as in each notebook's class (the default init consumes the RNG)
            self.key_layer, self.prediction_layer = linear(), linear()
        elif param == "FACO":
            self.key_layer, self.query_layer, self.prediction_layer = linear(), linear(), linear()
        elif param == "CAFO":
            self.key_layer, self.value_layer, self.prediction_layer = linear(), linear(), linear()
        else:
            self.key_layer, self.query_layer = linear(), linear()
            self.value_layer, self.prediction_layer = linear(), linear()

    def circuit_parameters(self, circuit: str) -> list[nn.Parameter]:
        names = ("key_layer", "query_layer") if circuit == "QK" else ("value_layer", "prediction_layer")
        return [getattr(self, n).weight for n in names if hasattr(self, n)]

    def matrices(self) -> dict[str, torch.Tensor]:
        """The layers as the head's matrices of :mod:`.model` (its W_QK = W_Q W_K^T and W_OV = W_O W_V):
        W_Q = query_layer^T, W_K = key_layer^T (collapsed: W_QK = key_layer), W_O = prediction_layer,
        W_V = value_layer (collapsed: W_OV = prediction_layer); views of the weights, autograd reaches them."""
        qk, ov = factorized(self.param)
        scores = ({"W_Q": self.query_layer.weight.T, "W_K": self.key_layer.weight.T} if qk
                  else {"W_QK": self.key_layer.weight})
        values = ({"W_O": self.prediction_layer.weight, "W_V": self.value_layer.weight} if ov
                  else {"W_OV": self.prediction_layer.weight})
        return {**scores, **values}

    def forward(self, counts: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits over all V ids (B, V) and attention mass per id (B, V): :func:`.model.head` at each sample's
        query id ``query`` (B,), every id a logit row."""
        return head(self.matrices(), log_counts(counts), SCALE, query, EVERY_ROW)


def init_kind(param: str, schedule: str) -> dict[str, str]:
    """circuit -> "default" (PyTorch) or "identity" (1e-6 I), per the notebooks (module docstring)."""
    if param == "CACO":
        return {"QK": "default", "OV": "default"}
    if param == "FAFO" and schedule == "equal":
        return {"QK": "default", "OV": "identity"}
    return {"QK": "identity", "OV": "identity"}


def new_model(param: str, seed: int, schedule: str) -> AuthorsHead:
    torch.manual_seed(seed)
    model = AuthorsHead(param)
    with torch.no_grad():
        for circuit, kind in init_kind(param, schedule).items():
            if kind == "identity":
                for p in model.circuit_parameters(circuit):
                    p.copy_(IDENTITY * torch.eye(VOCAB))
    return model


def qk_factor(schedule: str):
    if schedule == "equal":
        return lambda param, frac: 1.0
    if schedule == "qkfast":
        return lambda param, frac: QK_FAST[factorized(param)[0]]
    if schedule == "qk20":
        return lambda param, frac: 20.0
    return lambda param, frac: 1.0 + (RAMP_END[factorized(param)[0]] - 1.0) * frac


def notebook_arm(param: str, schedule: str) -> tuple[str, str]:
    """The notebook arm whose horizon ``(param, schedule)`` runs (module docstring: the arm itself where
    a notebook trains it, else the notebook arm of the same QK form and schedule)."""
    if (param, schedule) in NOTEBOOK_HORIZONS:
        return param, schedule
    return ("FAFO" if factorized(param)[0] else "CACO"), ("qkfast" if schedule == "qk20" else schedule)


def notebook_steps(param: str, schedule: str) -> int:
    """The notebooks' SGD steps for this arm (:data:`NOTEBOOK_HORIZONS` through :func:`notebook_arm`)."""
    return NOTEBOOK_HORIZONS[notebook_arm(param, schedule)][0]


def horizon(param: str, schedule: str, compression: float) -> int:
    """The arm's notebook horizon compressed by ``compression``: round(N / c) steps (at lr 1e-2 c)."""
    return max(1, round(notebook_steps(param, schedule) / compression))


def factors(model: AuthorsHead) -> Factors:
    """The head as (A, B, O, V_v) of :class:`~.sampled.Factors`: A = query_layer^T (collapsed QK: I),
    B = key_layer, O = prediction_layer, V_v = value_layer (collapsed OV: I)."""
    qk, ov = factorized(model.param)
    eye = torch.eye(VOCAB)
    return Factors(model.query_layer.weight.T if qk else eye, model.key_layer.weight,
                   model.prediction_layer.weight, model.value_layer.weight if ov else eye, qk, ov)


def task(compression: float) -> Task:
    """The recipe with every arm's notebook horizon compressed by ``compression`` (module docstring)."""
    return Task(
        name="authors", sample=sample, new_model=new_model, forward=lambda model, b: model(b.counts, b.query),
        base_lr=NOTEBOOK_LR * compression,
        qk_factor={s: qk_factor(s) for s in SCHEDULES},
        levels=(1.0, 0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3), window=100, target=1e-3,
        horizon=lambda param, schedule: horizon(param, schedule, compression),
        stream_key=SEQ_LEN.__getitem__, factors=factors, scale=SCALE, queries=QUERY_IDS,
    )
