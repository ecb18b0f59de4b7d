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
    assert all(torch.equal(p[0], q[0]) for p, q in zip(b.next_step(), expected, strict=True))


def test_ranks_split_the_accumulated_batch():
    tokens = np.arange(5000) % 251
    one = LMBatches(tokens, 8, batch_size=2, grad_accum=2, seed=1).next_step()
    r0 = LMBatches(tokens, 8, batch_size=2, grad_accum=1, seed=1, rank=0, world_size=2).next_step()
    r1 = LMBatches(tokens, 8, batch_size=2, grad_accum=1, seed=1, rank=1, world_size=2).next_step()
    assert torch.equal(one[0][0], r0[0][0]) and torch.equal(one[1][0], r1[0][0])


class Uniform(torch.nn.Module):
    def __init__(self, vocab=256):
        super().__init__()
        self.vocab = vocab

    def forward(self, x, y=None):
        return torch.zeros(*x.shape, self.vocab), None


def test_evaluator_perplexity_of_a_uniform_model():
    metrics = LMEvaluator(np.arange(300) % 256, 16, 200)(Uniform(), "cpu")
    assert metrics["val_ppl"] == pytest.approx(256) and metrics["val_bpb"] == pytest.approx(8)
    assert metrics["val_ppl_byte"] == pytest.approx(256) and metrics["val_tokens"] == 12 * 16


def test_evaluator_uses_the_whole_split_by_default_and_reports_an_interval():
    tokens = np.random.default_rng(0).integers(0, 256, 1000)
    full = LMEvaluator(tokens, 16)
    assert full.y.numel() == (999 // 16) * 16

    class Noisy(torch.nn.Module):  # a model whose loss varies from window to window
        def forward(self, x, y=None):
            return torch.nn.functional.one_hot(x % 256, 256).float() * (x % 7).unsqueeze(-1).float(), None

    m = full(Noisy(), "cpu")
    assert m["val_ppl_lo"] < m["val_ppl"] < m["val_ppl_hi"]


def test_per_byte_perplexity_counts_each_tokens_bytes():
    vocab = 4
    token_bytes = np.array([1, 2, 3, 4])
    tokens = np.array([0, 1, 2, 3] * 40)
    m = LMEvaluator(tokens, 8, token_bytes=token_bytes)(Uniform(vocab), "cpu")
    n_tokens, n_bytes = m["val_tokens"], m["val_bytes"]
    assert n_bytes == token_bytes[tokens[1:n_tokens + 1]].sum()
    assert m["val_ppl"] == pytest.approx(4) and m["val_ppl_byte"] == pytest.approx(4 ** (n_tokens / n_bytes))


def test_evaluator_equals_the_cross_entropy_of_whole_batches_taking_one_windows_log_softmax_at_a_time(monkeypatch):
    """The per-window cross-entropy gives the numbers of ``F.cross_entropy`` over a whole batch's logits (the
    metrics' definition; batches of 4 windows, the last one partial), and no call sees more than one window."""
    from qkdyn.empirical.coupled.attention import AttentionConfig
    from qkdyn.empirical.coupled.model import GPT, preset_config

    torch.manual_seed(0)
    model = GPT(preset_config("tiny", vocab_size=300, block_size=16, attention=AttentionConfig())).eval()
    evaluator = LMEvaluator(np.random.default_rng(0).integers(0, 300, 16 * 10 + 1), 16, batch_size=4)
    with torch.no_grad():
        per_window = []
        for i in range(0, len(evaluator.x), 4):
            logits = model(evaluator.x[i:i + 4])[0]
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, 300), evaluator.y[i:i + 4].reshape(-1),
                                                    reduction="none")
            per_window.append(nll.view(len(logits), -1).mean(1))
    window_loss = torch.cat(per_window).double()
    expected, se = window_loss.mean().item(), (window_loss.std() / len(window_loss) ** 0.5).item()

    seen = []
    cross_entropy = torch.nn.functional.cross_entropy
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", lambda z, *a, **k: seen.append(z.shape) or cross_entropy(z, *a, **k))
    metrics = evaluator(model, "cpu")
    assert metrics["val_loss"] == pytest.approx(expected, rel=1e-6)
    assert metrics["val_ppl_hi"] == pytest.approx(np.exp(expected + 1.96 * se), rel=1e-6)
    assert len(seen) == 10 and set(seen) == {(16, 300)}


TEXT = ("The query and the key evolve together before scoring. Attention looks where the key points. "
        "Größe, naïve café — 注意力.\n") * 40


def test_bpe_is_trained_cached_and_deterministic(tmp_path, monkeypatch):
    from qkdyn.empirical.data import text_bpe
    from qkdyn.empirical.data.text_bytes import encode as to_bytes

    data = to_bytes(TEXT)
    train, val = data[:-400], data[-400:]
    a = text_bpe.bpe_splits(train, val, 300, cache=tmp_path / "a")
    b = text_bpe.bpe_splits(train, val, 300, cache=tmp_path / "b")
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    (dir_a,), (dir_b,) = (tmp_path / "a").iterdir(), (tmp_path / "b").iterdir()
    assert (dir_a / "tokenizer.json").read_text() == (dir_b / "tokenizer.json").read_text()
    ids_train, ids_val, token_bytes = a
    assert len(ids_train) < 0.7 * len(train) and token_bytes.max() > 1  # merges were learnt
    count = lambda ids: int(np.asarray(token_bytes)[np.asarray(ids)].sum())  # noqa: E731
    assert count(ids_train) + count(ids_val) == len(data)  # every byte in exactly one split
    assert val[0] & 0xC0 == 0x80 and count(ids_val) > len(val)  # this cut split a character: moved to val

    from tokenizers import Tokenizer

    tok = Tokenizer.from_str((dir_a / "tokenizer.json").read_text())
    assert tok.decode(list(map(int, ids_train))) + tok.decode(list(map(int, ids_val))) == TEXT
    monkeypatch.setattr(text_bpe, "train_tokenizer", lambda *a: pytest.fail("the cache was not used"))
    c = text_bpe.bpe_splits(train, val, 300, cache=tmp_path / "a")
    assert all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    with pytest.raises(InputError):
        text_bpe.bpe_splits(train, val, 100, cache=tmp_path / "a")


def test_bpe_vocabulary_comes_from_the_training_split_only(tmp_path):
    from qkdyn.empirical.data.text_bpe import bpe_splits
    from qkdyn.empirical.data.text_bytes import encode as to_bytes

    train = to_bytes("alpha beta gamma " * 200)
    val_a, val_b = to_bytes("zzzzqqqq " * 50), to_bytes("alpha beta " * 50)
    (dir_a, *_), (dir_b, *_) = bpe_splits(train, val_a, 280, cache=tmp_path / "a"), bpe_splits(train, val_b, 280, cache=tmp_path / "b")
    vocab = lambda root: next(root.iterdir()) / "tokenizer.json"  # noqa: E731
    import json

    merges = [json.loads(vocab(tmp_path / d).read_text())["model"]["merges"] for d in ("a", "b")]
    assert merges[0] == merges[1] and np.array_equal(dir_a, dir_b)


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
    assert set(names) == {"wiki", "pydocs", "kerneldocs", "kernel", "brown-learned", "brown-full", "nlp-corpus"}
    assert not {"brown", "vader"} & set(names)
    assert all(re.fullmatch(r"[0-9a-f]{64}", s.sha256) for s in SOURCES)


def test_kerneldocs_prepare_reads_the_rst_sources_without_translations(tmp_path):
    (source,) = [s for s in SOURCES if s.name == "kerneldocs"]
    assert source.client == "apt" and source.package.startswith("linux-doc-")
    root = tmp_path / "unpacked" / "usr/share/doc/linux-doc-6.1/html/_sources"
    for rel, text in {"PCI/acpi-info.rst.txt": "ACPI considerations for PCI host bridges\n",
                      "admin-guide/index.rst.txt": "The Linux kernel user's guide\n",
                      "translations/zh_CN/index.rst.txt": "中文翻译\n",
                      "PCI/index.html": "<p>not a source</p>\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    out = tmp_path / "prepared"
    out.mkdir()
    source.prepare(tmp_path / "unpacked", out)
    assert (out / "text.txt").read_text(encoding="utf-8") == (
        "ACPI considerations for PCI host bridges\n\nThe Linux kernel user's guide\n")
    train, val = load_splits(str(out / "text.txt"), 0.25)
    assert decode(train) + decode(val) == (out / "text.txt").read_text(encoding="utf-8")
