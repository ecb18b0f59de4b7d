"""A cached corpus prepared by an older ``prepare`` (a lower format in its manifest) is prepared
again from the pinned archive, never read; one of a newer format is refused in one line."""
from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from qkdyn.empirical.data import fetch

from qkdyn.errors import InputError


def _source(tmp_path, fmt: int, calls: list):
    def prepare(unpacked, out):
        calls.append(fmt)
        (out / "items.txt").write_text(f"format {fmt}\n")

    return fetch.Source(name="toy", client="npm", package="toy@1", sha256="0" * 64, prepare=prepare,
                        summary="toy", format=fmt)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    state = {"calls": [], "source": None}
    monkeypatch.setattr(fetch, "all_sources", lambda: {"toy": state["source"]})

    def download(source, folder):
        archive = folder / "toy.tgz"
        archive.write_bytes(b"archive")
        return archive

    monkeypatch.setattr(fetch, "_download", download)
    monkeypatch.setattr(fetch, "sha256_of", lambda path: "0" * 64 if path.name == "toy.tgz" else
                        hashlib.sha256(path.read_bytes()).hexdigest())
    monkeypatch.setattr(fetch, "unpack", lambda archive, into: None)
    return state


def test_an_older_format_is_prepared_again(tmp_path, toy):
    toy["source"] = _source(tmp_path, 1, toy["calls"])
    out = fetch.fetch("toy")
    assert (out / "items.txt").read_text() == "format 1\n" and toy["calls"] == [1]
    assert fetch.fetch("toy") == out and toy["calls"] == [1]  # cached: not prepared again
    toy["source"] = _source(tmp_path, 2, toy["calls"])
    assert not fetch.is_cached("toy")
    out = fetch.fetch("toy")
    assert (out / "items.txt").read_text() == "format 2\n" and toy["calls"] == [1, 2]
    assert json.loads((out / fetch.MANIFEST).read_text())["format"] == 2
    assert fetch.is_cached("toy")


def test_a_manifest_without_format_reads_as_format_one(tmp_path, toy):
    toy["source"] = _source(tmp_path, 1, toy["calls"])
    out = fetch.fetch("toy")
    manifest = json.loads((out / fetch.MANIFEST).read_text())
    del manifest["format"]
    (out / fetch.MANIFEST).write_text(json.dumps(manifest))
    assert fetch.is_cached("toy") and fetch.fetch("toy") == out and toy["calls"] == [1]


def test_a_newer_format_is_refused_in_one_line(tmp_path, toy):
    toy["source"] = _source(tmp_path, 3, toy["calls"])
    fetch.fetch("toy")
    toy["source"] = dataclasses.replace(toy["source"], format=2)
    with pytest.raises(InputError, match="prepared in format 3, this qkdyn reads format 2"):
        fetch.fetch("toy")
