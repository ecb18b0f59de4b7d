"""``qkdyn lm``: train a GPT language model (BPE or byte tokens) with a chosen attention variant."""
from __future__ import annotations

import argparse

from qkdyn.empirical.coupled.cli_common import add_model_arguments, add_train_arguments, attention_config, train_config

HELP = "train a GPT LM (BPE or byte tokens) with standard, coupled-QK, MLP-only or differential attention"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True,
                        help="corpus: wiki, pydocs, brown-learned, brown-full, nlp-corpus, or a text file/directory")
    parser.add_argument("--block-size", type=int, default=None, help="context length (default: the preset's)")
    parser.add_argument("--eval-tokens", type=int, default=None, help="cap on validation tokens per evaluation (default: all)")
    parser.add_argument("--tokenizer", default="bpe", choices=("bpe", "byte"), help="sub-word BPE (default) or bytes")
    parser.add_argument("--vocab-size", type=int, default=8192, help="BPE vocabulary size (learnt on the training split)")
    parser.add_argument("--val-fraction", type=float, default=0.05, help="held-out share when no validation file")
    add_model_arguments(parser)
    add_train_arguments(parser, max_steps=300, lr=3e-3)


def run(args: argparse.Namespace) -> int:
    from qkdyn.errors import InputError
    from qkdyn.empirical.coupled.experiment import run_lm

    if not 0 < args.val_fraction < 1:
        raise InputError("--val-fraction must be in (0, 1)")
    if args.block_size is not None and args.block_size < 2:
        raise InputError("--block-size must be >= 2")
    from qkdyn.empirical.data.text_bpe import MIN_VOCAB

    if args.tokenizer == "bpe" and args.vocab_size < MIN_VOCAB:
        raise InputError(f"--vocab-size must be >= {MIN_VOCAB} for byte-level BPE, got {args.vocab_size}")
    summary = run_lm(args.data, args.preset, attention_config(args), train_config(args), args.out,
                     args.block_size, args.eval_tokens, args.val_fraction, args.tokenizer, args.vocab_size)
    if summary:
        print(f"{args.out}: val_ppl {summary['final']['val_ppl']:.4f} per token, "
              f"{summary['final']['val_ppl_byte']:.4f} per byte after {summary['tokens']} tokens "
              f"({summary['tokens_per_s']:.0f} tokens/s)")
    return 0
