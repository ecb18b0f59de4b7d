"""One language-modelling run or one MQAR run, from configs to ``result.json``.

Shared by the command line (``qkdyn lm``, ``qkdyn mqar``) and the study runner.
"""
from __future__ import annotations

from qkdyn.empirical.coupled.attention import AttentionConfig
from qkdyn.empirical.coupled.model import count_parameters, preset_config
from qkdyn.empirical.coupled.train import TrainConfig, train


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


def run_lm(data: str, preset: str, attention: AttentionConfig, cfg: TrainConfig, out_dir: str,
           block_size: int | None = None, eval_tokens: int = 65536, val_fraction: float = 0.05) -> dict:
    """Train a byte-level LM of shape ``preset`` on corpus ``data`` (name or path)."""
    from qkdyn.empirical.data.text_bytes import VOCAB_SIZE
    from qkdyn.empirical.data.text_corpus import load_splits
    from qkdyn.empirical.coupled.lm_data import LMBatches, LMEvaluator

    overrides = {"vocab_size": VOCAB_SIZE, "attention": attention}
    if block_size:
        overrides["block_size"] = block_size
    model_cfg = preset_config(preset, **overrides)
    check_sizes(model_cfg, cfg)
    train_tokens, val_tokens = load_splits(data, val_fraction)
    evaluator = LMEvaluator(val_tokens, model_cfg.block_size, eval_tokens)

    def make_batches(seed, rank, world):
        return LMBatches(train_tokens, model_cfg.block_size, cfg.batch_size, cfg.grad_accum, seed, rank, world)

    extra = {"task": "lm", "data": data, "preset": preset, "eval_tokens": eval_tokens, "val_fraction": val_fraction}
    return train(model_cfg, cfg, make_batches, evaluator, out_dir, extra)


def run_mqar(task: str, preset: str, attention: AttentionConfig, cfg: TrainConfig, out_dir: str,
             n_test: int = 256) -> dict:
    """Train a model of shape ``preset`` on MQAR preset ``task`` (easy, medium, hard)."""
    from qkdyn.empirical.coupled.mqar import PRESETS, MQARBatches, MQAREvaluator

    mqar = PRESETS[task]
    model_cfg = preset_config(preset, vocab_size=mqar.vocab_size, block_size=mqar.block_size, attention=attention)
    check_sizes(model_cfg, cfg)
    evaluator = MQAREvaluator(mqar, n_test, cfg.seed)

    def make_batches(seed, rank, world):
        return MQARBatches(mqar, cfg.batch_size, cfg.grad_accum, seed, rank, world)

    extra = {"task": "mqar", "mqar": task, "preset": preset, "n_test": n_test}
    return train(model_cfg, cfg, make_batches, evaluator, out_dir, extra)
