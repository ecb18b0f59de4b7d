"""One language-modelling run or one MQAR run, from configs to ``result.json``.

Shared by the command line (``qkdyn lm``, ``qkdyn mqar``) and the study runner.
"""
from __future__ import annotations

from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import preset_config
from qkdyn.empirical.coupled.train import TrainConfig, train


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


def with_strength(evaluate, probe: "torch.Tensor"):
    """``evaluate`` plus the coupling strength of the model on the batch ``probe``
    (:func:`qkdyn.empirical.coupled.strength.measure`)."""
    from qkdyn.empirical.coupled.strength import measure

    def run(model, device) -> dict:
        return {**evaluate(model, device), **measure(model, probe.to(device))}

    return run


def run_lm(data: str, preset: str, attention: AttentionConfig, cfg: TrainConfig, out_dir: str,
           block_size: int | None = None, eval_tokens: int | None = None, val_fraction: float = 0.05,
           tokenizer: str = "bpe", vocab_size: int = 8192) -> dict:
    """Train an LM of shape ``preset`` on corpus ``data`` (name or path) with ``tokenizer`` tokens,
    evaluated on the whole validation split (or its first ``eval_tokens`` tokens)."""
    from qkdyn.empirical.coupled.lm_data import LMBatches, LMEvaluator

    train_tokens, val_tokens, token_bytes, vocab = lm_splits(data, tokenizer, vocab_size, val_fraction)
    overrides = {"vocab_size": vocab, "attention": attention}
    if block_size:
        overrides["block_size"] = block_size
    model_cfg = preset_config(preset, **overrides)
    evaluator = LMEvaluator(val_tokens, model_cfg.block_size, eval_tokens, token_bytes=token_bytes)
    evaluate = with_strength(evaluator, evaluator.x[:8])

    def make_batches(seed, rank, world):
        return LMBatches(train_tokens, model_cfg.block_size, cfg.batch_size, cfg.grad_accum, seed, rank, world)

    extra = {"task": "lm", "data": data, "preset": preset, "eval_tokens": eval_tokens, "val_fraction": val_fraction,
             "tokenizer": tokenizer, "vocab": vocab}
    return train(model_cfg, cfg, make_batches, evaluate, out_dir, extra)


def run_mqar(task: str, preset: str, attention: AttentionConfig, cfg: TrainConfig, out_dir: str,
             n_test: int = 256) -> dict:
    """Train a model of shape ``preset`` on MQAR preset ``task`` (easy, medium, hard)."""
    from qkdyn.empirical.coupled.mqar import PRESETS, MQARBatches, MQAREvaluator

    mqar = PRESETS[task]
    model_cfg = preset_config(preset, vocab_size=mqar.vocab_size, block_size=mqar.block_size, attention=attention)
    evaluator = MQAREvaluator(mqar, n_test, cfg.seed)
    evaluate = with_strength(evaluator, next(iter(evaluator.sets.values()))[0][:8])

    def make_batches(seed, rank, world):
        return MQARBatches(mqar, cfg.batch_size, cfg.grad_accum, seed, rank, world)

    extra = {"task": "mqar", "mqar": task, "preset": preset, "n_test": n_test}
    return train(model_cfg, cfg, make_batches, evaluate, out_dir, extra)
