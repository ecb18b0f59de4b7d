"""One language-modelling run or one MQAR run, from configs to ``result.json`` (a :class:`~qkdyn.runs.RunRecord`).

Shared by the command line (``qkdyn lm``, ``qkdyn mqar``) and the study runner.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import count_parameters, preset_config
from qkdyn.empirical.coupled.train import TrainConfig, train

if TYPE_CHECKING:
    import torch


def check_sizes(model_cfg, cfg: TrainConfig) -> None:
    """Refuse a run that cannot fit in host memory: float32 parameters (count in closed form) with
    gradients and two AdamW moments (16 bytes each), and on the CPU the activations of one
    micro-batch, about B T n_layer (20 d + 3 heads T) numbers plus B T V logits twice."""
    from qkdyn.memory import check_memory

    need = 16 * count_parameters(model_cfg)
    if cfg.device in ("auto", "cpu"):
        B, T = cfg.batch_size, model_cfg.block_size
        need += 4 * (B * T * model_cfg.n_layer * (20 * model_cfg.d_model + 3 * model_cfg.n_head * T)
                     + 2 * B * T * model_cfg.vocab_size)
    check_memory(need, f"{count_parameters(model_cfg):,} parameters, batch {cfg.batch_size}, "
                       f"block {model_cfg.block_size}")


TOKENIZERS = ("bpe", "byte")


def lm_splits(data: str, tokenizer: str = "bpe", vocab_size: int = 8192, val_fraction: float = 0.05):
    """(train ids, validation ids, token_bytes, vocabulary size) of corpus ``data`` under ``tokenizer``:
    ``byte`` (UTF-8 bytes, vocabulary 256) or ``bpe`` (byte-level BPE of ``vocab_size`` learnt on the
    training split, :mod:`qkdyn.empirical.data.text_bpe`)."""
    from qkdyn.empirical.data.text_corpus import load_splits

    from qkdyn.errors import InputError

    if tokenizer not in TOKENIZERS:
        raise InputError(f"must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}", "tokenizer")
    train_bytes, val_bytes = load_splits(data, val_fraction)
    if tokenizer == "byte":
        from qkdyn.empirical.data.text_bytes import VOCAB_SIZE

        return train_bytes, val_bytes, None, VOCAB_SIZE
    from qkdyn.empirical.data.text_bpe import bpe_splits

    train, val, token_bytes = bpe_splits(train_bytes, val_bytes, vocab_size)
    return train, val, token_bytes, vocab_size


class EvaluationRow:
    """What every evaluation of a run logs: ``evaluate``'s metrics, the changes under each applicable
    ablation on the same evaluator (:class:`~qkdyn.empirical.coupled.ablation.WithAblations`, ``ablations``:
    after training it holds the final model's, which ``ablation.json`` records) and the coupling strength of
    the model on the batch ``probe``, per head too (:func:`qkdyn.empirical.coupled.strength.measure`)."""

    def __init__(self, evaluate, probe: torch.Tensor):
        from qkdyn.empirical.coupled.ablation import WithAblations

        self.ablations, self.probe = WithAblations(evaluate), probe

    def __call__(self, model, device) -> dict:
        from qkdyn.empirical.coupled.strength import measure

        return {**self.ablations(model, device), **measure(model, self.probe.to(device))}


def run_lm(data: str, preset: str, attention: AttentionConfig, cfg: TrainConfig, out_dir: str,
           block_size: int | None = None, eval_tokens: int | None = None, val_fraction: float = 0.05,
           tokenizer: str = "bpe", vocab_size: int = 8192, n_head: int | None = None):
    """Train an LM of shape ``preset`` (with ``n_head`` heads instead of the preset's when given) on corpus
    ``data`` (name or path) with ``tokenizer`` tokens, evaluated on the whole validation split (or its
    first ``eval_tokens`` tokens)."""
    from qkdyn.empirical.coupled.lm_data import LMBatches, LMEvaluator
    from qkdyn.empirical.data.text_bytes import VOCAB_SIZE

    overrides = {"vocab_size": VOCAB_SIZE if tokenizer == "byte" else vocab_size, "attention": attention}
    if block_size:
        overrides["block_size"] = block_size
    if n_head:
        overrides["n_head"] = n_head
    model_cfg = preset_config(preset, **overrides)
    check_sizes(model_cfg, cfg)
    train_tokens, val_tokens, token_bytes, _ = lm_splits(data, tokenizer, vocab_size, val_fraction)
    evaluator = LMEvaluator(val_tokens, model_cfg.block_size, eval_tokens, token_bytes=token_bytes)
    evaluate = EvaluationRow(evaluator, evaluator.x[:8])

    def make_batches(seed, rank, world):
        return LMBatches(train_tokens, model_cfg.block_size, cfg.batch_size, cfg.grad_accum, seed, rank, world)

    extra = {"task": "lm", "data": data, "preset": preset, "eval_tokens": eval_tokens, "val_fraction": val_fraction,
             "tokenizer": tokenizer, "vocab": model_cfg.vocab_size}
    return _with_ablations(train(model_cfg, cfg, make_batches, evaluate, out_dir, extra), out_dir, evaluate)


def _with_ablations(record, out_dir: str, evaluate: EvaluationRow):
    """After training (rank 0): the final model as trained and ablated, as its last evaluation measured it
    (:mod:`qkdyn.empirical.coupled.ablation`, ``ablation.json``: not evaluated again); the record (None on
    other ranks)."""
    from qkdyn.empirical.coupled.ablation import write_ablations

    if record is not None:
        write_ablations(out_dir, record.steps, evaluate.ablations.last)
    return record


def run_mqar(task: str, preset: str, attention: AttentionConfig, cfg: TrainConfig, out_dir: str,
             n_test: int = 256):
    """Train a model of shape ``preset``, initialised as :data:`~qkdyn.empirical.coupled.configs.MQAR_INIT`,
    on MQAR preset ``task`` (small, easy, medium, hard)."""
    from qkdyn.empirical.coupled.configs import MQAR_INIT, MQAR_PRESETS
    from qkdyn.empirical.coupled.mqar import MQARBatches, MQAREvaluator

    mqar = MQAR_PRESETS[task]
    model_cfg = preset_config(preset, vocab_size=mqar.vocab_size, block_size=mqar.block_size, attention=attention,
                              init=MQAR_INIT)
    check_sizes(model_cfg, cfg)
    from qkdyn.memory import check_memory

    # the fixed test set: int64 inputs and labels of n_test sequences per setting, built with a copy each
    check_memory(32 * n_test * sum(t for t, _ in mqar.settings), f"{n_test} test sequences per setting", "n_test")
    evaluator = MQAREvaluator(mqar, n_test, cfg.seed)
    evaluate = EvaluationRow(evaluator, next(iter(evaluator.sets.values()))[0][:8])

    def make_batches(seed, rank, world):
        return MQARBatches(mqar, cfg.batch_size, cfg.grad_accum, seed, rank, world)

    extra = {"task": "mqar", "mqar": task, "preset": preset, "n_test": n_test}
    return _with_ablations(train(model_cfg, cfg, make_batches, evaluate, out_dir, extra), out_dir, evaluate)
