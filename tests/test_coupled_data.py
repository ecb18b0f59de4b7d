"""Byte tokenisation, corpus loading and splitting, batch sources, markup stripping, LM sources."""
import re

import numpy as np
import pytest
import torch

from qkdyn.empirical.coupled.lm_data import LMBatches, LMEvaluator
from qkdyn.empirical.data.sources_lm import SOURCES
from qkdyn.empirical.data.text_bytes import decode, encode
from qkdyn.empirical.data.text_corpus import load_splits
from qkdyn.empirical.data.text_markup import detag_brown, strip_wikitext
from qkdyn.errors import InputError


def test_bytes_round_trip():
    text = "Grüße, attention — 注意"
    tokens = encode(text)
    assert tokens.dtype == np.uint8 and len(tokens) == len(text.encode()) and decode(tokens) == text


def test_file_is_split_at_the_validation_fraction(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(bytes(range(100)))
    train, val = load_splits(str(path), 0.1)
    assert list(train) == list(range(90)) and list(val) == list(range(90, 100))


def test_directory_with_train_and_valid_files_uses_them(tmp_path):
    (tmp_path / "wiki.train.tokens").write_text("train text")
    (tmp_path / "wiki.valid.tokens").write_text("valid")
    (tmp_path / "wiki.test.tokens").write_text("test")
    train, val = load_splits(str(tmp_path))
    assert decode(train) == "train text" and decode(val) == "valid"


def test_unknown_corpus_is_a_user_error(tmp_path):
    with pytest.raises(InputError):
        load_splits(str(tmp_path / "missing"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(InputError):
        load_splits(str(tmp_path / "empty.txt"))


def test_batches_are_shifted_seeded_and_resumable():
    tokens = np.arange(1000) % 251
    a = LMBatches(tokens, 8, batch_size=3, grad_accum=2, seed=5)
    (x, y), _ = a.next_step()
    assert x.shape == (3, 8) and torch.equal(x[:, 1:], y[:, :-1])
    state = a.state_dict()
    expected = a.next_step()
    b = LMBatches(tokens, 8, batch_size=3, grad_accum=2, seed=99)
    b.load_state_dict(state)
    assert all(torch.equal(p[0], q[0]) for p, q in zip(b.next_step(), expected))


def test_ranks_split_the_accumulated_batch():
    tokens = np.arange(5000) % 251
    one = LMBatches(tokens, 8, batch_size=2, grad_accum=2, seed=1).next_step()
    r0 = LMBatches(tokens, 8, batch_size=2, grad_accum=1, seed=1, rank=0, world_size=2).next_step()
    r1 = LMBatches(tokens, 8, batch_size=2, grad_accum=1, seed=1, rank=1, world_size=2).next_step()
    assert torch.equal(one[0][0], r0[0][0]) and torch.equal(one[1][0], r1[0][0])


def test_evaluator_perplexity_of_a_uniform_model():
    class Uniform(torch.nn.Module):
        def forward(self, x, y):
            logits = torch.zeros(*x.shape, 256)
            return logits, torch.nn.functional.cross_entropy(logits.view(-1, 256), y.reshape(-1))

    metrics = LMEvaluator(np.arange(300) % 256, 16, 200)(Uniform(), "cpu")
    assert metrics["val_ppl"] == pytest.approx(256) and metrics["val_bpb"] == pytest.approx(8)


def test_wikitext_markup_is_stripped():
    raw = ("{{Infobox|a={{b}}}}'''Anarchism''' is a [[political philosophy]] of [[self-governance|self-governed]] "
           "societies.<ref>cite</ref> [[File:x.png|thumb|a [[y]] caption]]\n== History ==\nSee [http://x.org the site].")
    assert strip_wikitext(raw) == ("Anarchism is a political philosophy of self-governed societies.\n"
                                   "History\nSee the site.")


def test_brown_tags_are_removed():
    raw = "\n\n\tThe/at jury/nn said/vbd ``/`` it/pps did/dod n't/* ''/'' ,/, too/rb ./.\n"
    assert detag_brown(raw) == 'The jury said "it didn\'t", too.'


def test_lm_sources_are_pinned_and_do_not_clash_with_circuits_names():
    names = [s.name for s in SOURCES]
    assert set(names) == {"wiki", "pydocs", "brown-learned", "brown-full", "nlp-corpus"}
    assert not {"brown", "vader"} & set(names)
    assert all(re.fullmatch(r"[0-9a-f]{64}", s.sha256) for s in SOURCES)
