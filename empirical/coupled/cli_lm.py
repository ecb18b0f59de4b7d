"""``qkdyn lm``: train a byte-level GPT language model with a chosen attention variant."""
from __future__ import annotations

import argparse

from qkdyn.configflags import fraction, parser as parser_of
from qkdyn.empirical.coupled.cli_common import add_model_arguments, add_train_arguments, attention_config, train_config
from qkdyn.settingflags import positive_int

HELP = "train a byte-level GPT LM with standard, coupled-QK, MLP-only or differential attention"


def block_size(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True,
                        help="corpus: wiki, pydocs, brown-learned, brown-full, nlp-corpus, or a text file/directory")
    parser.add_argument("--block-size", type=block_size, default=None,
                        help="context length >= 2 (default: the preset's)")
    parser.add_argument("--eval-tokens", type=positive_int, default=65536, help="validation tokens per evaluation")
    parser.add_argument("--val-fraction", type=parser_of(fraction(low_open=True, high_open=True)), default=0.05,
                        help="held-out share when no validation file, in (0, 1)")
    add_model_arguments(parser)
    add_train_arguments(parser, max_steps=300, lr=3e-3)


def run(args: argparse.Namespace) -> int:
    from qkdyn.empirical.coupled.experiment import run_lm
    from qkdyn.runs import pin_threads

    attention, train = attention_config(args), train_config(args)
    pin_threads(args.threads)
    summary = run_lm(args.data, args.preset, attention, train, args.out, args.block_size, args.eval_tokens,
                     args.val_fraction)
    if summary:
        print(f"{args.out}: val_ppl {summary['final']['val_ppl']:.4f} after {summary['tokens']} tokens "
              f"({summary['tokens_per_s']:.0f} tokens/s)")
    return 0
