"""The corpus of the ``gpu`` budget (``kernel``: Linux's Documentation tree and kernel-doc comments) and
its travel to a machine without the registries: packed here, checked and unpacked there. Fixture-sized,
no network."""
import io
import json
import tarfile

import pytest
from qkdyn.empirical.data import fetch
from qkdyn.empirical.data.fetch import Source, pack_cached, unpack_packed
from qkdyn.empirical.data.sources_lm import SOURCES, kernel_doc_comments
from qkdyn.empirical.data.text_corpus import load_splits

from qkdyn.errors import InputError

DRIVER = '''// SPDX-License-Identifier: GPL-2.0
/* an ordinary comment, not documentation */
/**
 * foo_probe() - bind the foo device
 * @dev: the device
 *
 * Return: 0 on success.
 */
int foo_probe(struct device *dev);
/** not kernel-doc: the comment goes on on its line */
/**
 * struct foo - the state of one foo
 */
'''
HEADER = '''/**
 * struct foo - the state of one foo
 */
/**
 * foo_reset() - reset the foo
 */
'''


def _tarball(path, files: dict[str, str]):
    with tarfile.open(path, "w:xz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"linux-source-6.1/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_kernel_doc_comments_are_the_documentation_comments_without_their_markers():
    assert kernel_doc_comments(DRIVER) == [
        "foo_probe() - bind the foo device\n@dev: the device\n\nReturn: 0 on success.",
        "struct foo - the state of one foo"]
    assert kernel_doc_comments("int x; /* plain */\n") == []


def test_kernel_prepare_reads_english_documentation_and_unique_kernel_doc_comments(tmp_path):
    (source,) = [s for s in SOURCES if s.name == "kernel"]
    assert source.client == "apt" and source.package.startswith("linux-source-")
    unpacked = tmp_path / "unpacked"
    (unpacked / "usr/src").mkdir(parents=True)
    _tarball(unpacked / "usr/src/linux-source-6.1.tar.xz", {
        "Documentation/admin-guide/foo.rst": "The foo driver\n==============\n\nIt binds foos.\n",
        "Documentation/notes.txt": "Plain text notes.\n",
        "Documentation/translations/zh_CN/foo.rst": "中文翻译\n",
        "Documentation/images/foo.svg": "<svg/>\n",
        "drivers/foo/foo.c": DRIVER,
        "include/linux/foo.h": HEADER,  # its struct comment repeats the driver's: kept once
        "Makefile": "obj-y += foo.o\n"})
    out = tmp_path / "prepared"
    out.mkdir()
    source.prepare(unpacked, out)
    text = (out / "text.txt").read_text(encoding="utf-8")
    documents = text.rstrip("\n").split("\n\n")
    assert "中文" not in text and "<svg" not in text and "obj-y" not in text and "ordinary comment" not in text
    assert text.count("struct foo - the state of one foo") == 1 and "foo_reset() - reset the foo" in documents
    for kept in ("It binds foos.", "Plain text notes.", "@dev: the device", "Return: 0 on success."):
        assert kept in text
    shuffled = [d for d in documents if d.startswith(("The foo driver", "Plain text", "foo_probe", "foo_reset"))]
    assert len(shuffled) == 4  # every document once, in the fixed order of its path's hash
    again = tmp_path / "again"
    again.mkdir()
    source.prepare(unpacked, again)
    assert (again / "text.txt").read_bytes() == (out / "text.txt").read_bytes()
    train, val = load_splits(str(out / "text.txt"), 0.25)
    assert len(train) + len(val) == len(text.encode())


@pytest.fixture
def cached_corpus(tmp_path, monkeypatch):
    """A pinned fake source 'tiny' cached in a fresh cache, as fetch leaves a corpus."""
    source = Source("tiny", "apt", "tiny=1", "0" * 64, lambda unpacked, out: None, "a test corpus")
    monkeypatch.setattr(fetch, "all_sources", lambda: {"tiny": source})
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "here"))
    prepared = tmp_path / "here" / "tiny"
    prepared.mkdir(parents=True)
    (prepared / "text.txt").write_text("some documentation\n" * 50)
    fetch.write_manifest(source, prepared)
    return prepared


def test_a_packed_corpus_unpacks_elsewhere_as_fetched(cached_corpus, tmp_path, monkeypatch):
    archive = pack_cached("tiny", tmp_path / "carry")
    assert archive.name == "tiny.tar.xz" and (tmp_path / "carry" / "tiny.tar.xz.sha256").read_text().split()[1] == archive.name
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "there"))  # the other machine's empty cache
    out = unpack_packed(archive)
    assert out == tmp_path / "there" / "tiny" and fetch.fetch("tiny") == out  # verified, nothing downloaded
    assert (out / "text.txt").read_bytes() == (cached_corpus / "text.txt").read_bytes()
    assert unpack_packed(archive) == out  # already there: verified and kept


def test_a_damaged_or_foreign_package_is_refused(cached_corpus, tmp_path, monkeypatch):
    archive = pack_cached("tiny", tmp_path / "carry")
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "there"))
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 1
    archive.with_name("copy").mkdir()
    broken = archive.with_name("copy") / archive.name
    broken.write_bytes(bytes(data))
    (broken.parent / f"{archive.name}.sha256").write_text((archive.parent / f"{archive.name}.sha256").read_text())
    with pytest.raises(InputError, match="does not match its sha256"):
        unpack_packed(broken)
    (broken.parent / f"{archive.name}.sha256").unlink()
    with pytest.raises(InputError, match="sha256 of tiny.tar.xz"):
        unpack_packed(broken)
    with pytest.raises(InputError, match="not a packed corpus"):
        unpack_packed(tmp_path / "carry" / "other.tar.xz")
    # a well-hashed archive whose files differ from the manifest's pins: the pins catch it
    manifest = json.dumps(json.loads((cached_corpus / fetch.MANIFEST).read_text()))
    for folder, files, refusal in (
            ("evil", {"tiny/text.txt": "other text\n", f"tiny/{fetch.MANIFEST}": manifest}, "wrong size|sha256 pin"),
            ("stray", {"tiny/text.txt": "x\n", "elsewhere/x": "x\n"}, "more than the files of tiny/")):
        evil = tmp_path / folder / "tiny.tar.xz"
        evil.parent.mkdir()
        with tarfile.open(evil, "w:xz") as tar:
            for name, text in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))
        (evil.parent / "tiny.tar.xz.sha256").write_text(f"{fetch.sha256_of(evil)}  tiny.tar.xz\n")
        with pytest.raises(InputError, match=refusal):
            unpack_packed(evil)
    assert not (tmp_path / "there" / "tiny").exists()
