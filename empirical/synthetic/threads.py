"""Torch on one thread for a block of code: the synthetic model's tensors are small, so more threads only
contend (and spin-wait on a shared machine)."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread inside the block (the matrices are tiny: more threads only contend)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
