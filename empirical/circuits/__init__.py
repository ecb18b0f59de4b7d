"""Transformer-scale tests of Paper A: per-circuit (QK vs OV) learning rates on real tasks."""
