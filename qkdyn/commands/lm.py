"""``qkdyn lm``: train a GPT language model (BPE or byte tokens) with a chosen attention variant."""
from __future__ import annotations

import argparse

from qkdyn.commands.coupled_flags import add_model_arguments, add_train_arguments, attention_config, train_config
from qkdyn.configflags import fraction
from qkdyn.configflags import parser as parser_of
from qkdyn.empirical.coupled.configs import PRESET_BLOCK_SIZES
from qkdyn.settingflags import positive_int

HELP = "train a GPT LM (BPE or byte tokens) with standard, coupled-QK, MLP-only or differential attention"


def block_size(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {text!r}")
    return value


def vocab_size(text: str) -> int:
    from qkdyn.empirical.data.text_bpe import MIN_VOCAB

    value = positive_int(text)
    if value < MIN_VOCAB:
        raise argparse.ArgumentTypeError(f"must be >= {MIN_VOCAB} for byte-level BPE, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from qkdyn.empirical.data.sources_lm import SOURCES

    parser.add_argument("--data", required=True,
                        help=f"corpus: {', '.join(s.name for s in SOURCES)}, or a text file/directory")
    parser.add_argument("--block-size", type=block_size, default=None,
                        help="context length >= 2 (default: the preset's: "
                        + ", ".join(f"{name} {size}" for name, size in PRESET_BLOCK_SIZES.items()) + ")")
    parser.add_argument("--eval-tokens", type=positive_int, default=None,
                        help="cap on validation tokens per evaluation (default: the whole split)")
    parser.add_argument("--tokenizer", default="bpe", choices=("bpe", "byte"), help="sub-word BPE (default) or bytes")
    parser.add_argument("--vocab-size", type=vocab_size, default=None,
                        help="BPE vocabulary size, learnt on the training split (--tokenizer bpe; default 8192)")
    parser.add_argument("--val-fraction", type=parser_of(fraction(low_open=True, high_open=True)), default=0.05,
                        help="held-out share when no validation file, in (0, 1)")
    add_model_arguments(parser)
    add_train_arguments(parser, max_steps=300, lr=3e-3)


def run(args: argparse.Namespace) -> int:
    from qkdyn.empirical.coupled.experiment import run_lm
    from qkdyn.errors import InputError
    from qkdyn.runs import pin_threads

    if args.tokenizer == "byte" and args.vocab_size is not None:
        raise InputError("--vocab-size applies only with --tokenizer bpe (bytes have 256 tokens); leave it out")
    attention, train = attention_config(args), train_config(args)
    pin_threads(args.threads)
    record = run_lm(args.data, args.preset, attention, train, args.out, args.block_size, args.eval_tokens,
                     args.val_fraction, args.tokenizer, args.vocab_size or 8192)
    if record is not None:
        print(f"{args.out}: val_ppl {record.final['val_ppl']:.4f} per token, "
              f"{record.final['val_ppl_byte']:.4f} per byte after {record.details['tokens']} tokens "
              f"({record.details['tokens_per_s']:.0f} tokens/s)")
    return 0
