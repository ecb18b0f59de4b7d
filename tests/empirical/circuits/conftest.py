"""Shared by the circuits tests: every test runs torch on one thread (tiny models run faster on one
thread, and the machine's cores are shared), restored afterwards."""
import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
