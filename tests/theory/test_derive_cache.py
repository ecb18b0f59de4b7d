"""derive's results on disk (qkdyn.theory.derive_cache): read back equal, reused by a second process,
and an entry that is damaged, foreign, another user's or crafted is ignored with one line and derived again."""
import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import pytest
import sympy as sp
from qkdyn.theory import derive_cache, derived
from qkdyn.theory.spec import CircuitSpec, Spec

import qkdyn

#: a spec that is no exact form's model and whose line is held as quadrature callables (LineCoordinate)
RANK2 = Spec("rank2", qk=CircuitSpec("factorized", rank=2))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path))
    return tmp_path / "derive"


def _derive(param):
    """derive without its per-process cache: what a fresh process does."""
    return derived.derive.__wrapped__(param)


def _refuse_to_derive(monkeypatch):
    def refuse(*args):
        raise AssertionError("derived again although the cache holds it")

    monkeypatch.setattr(derived, "_form_fields", refuse)
    monkeypatch.setattr(derived, "_spec_fields", refuse)


@pytest.mark.parametrize("param", ["paper", "CACO", RANK2], ids=["paper", "CACO", "spec"])
def test_an_entry_reads_back_equal_without_deriving(param, cache, monkeypatch):
    first = _derive(param)
    assert [path.suffix for path in cache.iterdir()] == [".json"]
    _refuse_to_derive(monkeypatch)
    again = _derive(param)
    assert again == first
    for field in ("ode", "jacobian", "invariants", "line", "metric", "laws", "growth", "not_derived", "penalty"):
        assert getattr(again, field) == getattr(first, field), field
    if isinstance(param, Spec):
        assert again.spec == param and [type(c).__name__ for c in again.line] == ["LineCoordinate"] * 2
        assert again.line[0].spec is param


def test_a_spec_that_is_an_exact_forms_model_shares_the_forms_entry(cache, monkeypatch):
    _derive("paper")
    _derive("CACO")
    _refuse_to_derive(monkeypatch)
    d = _derive(Spec("mine"))  # CACO's model under another name
    assert d.param == "CACO" and d.spec == Spec("mine") and len(list(cache.iterdir())) == 2


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                          env=env)


def test_a_second_process_reads_the_entry_instead_of_deriving(cache):
    env = {**os.environ, "QKDYN_CACHE": str(cache.parent)}
    probe = ("import sys, qkdyn; d = qkdyn.derive('paper'); "
             "print('qkdyn.theory.asymptotics' in sys.modules, d.growth['ov'])")
    first, second = _run(probe, env), _run(probe, env)
    assert first.stdout.split()[0] == "True"  # the precondition: deriving imports the derivation modules
    assert second.stdout.split()[0] == "False" and second.stdout.split()[1:] == first.stdout.split()[1:]
    assert first.stderr == second.stderr == ""


def _entry(cache):
    (path,) = cache.iterdir()
    return path


def _rewrite(path, body: str) -> None:
    path.write_text(hashlib.sha256(body.encode()).hexdigest() + "\n" + body)


def _one_warning(capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "derive's cache entry" in err and fragment in err and "deriving it again" in err, err


@pytest.mark.parametrize("damage,fragment", [
    (lambda text: text[: len(text) // 2], "fails its checksum"),
    (lambda text: text.replace('"qk"', '"QK"', 1), "fails its checksum"),
    (lambda text: "0" * 64 + text[64:], "fails its checksum"),
])
def test_a_damaged_entry_is_one_line_and_derived_again(damage, fragment, cache, capsys):
    good = _derive("paper")
    path = _entry(cache)
    path.write_text(damage(path.read_text()))
    assert _derive("paper") == good
    _one_warning(capsys, fragment)
    assert derive_cache.read(path, "paper") is not None  # replaced by a good entry
    assert capsys.readouterr().err == ""


def test_a_foreign_entry_is_one_line_and_derived_again(cache, capsys):
    good = _derive("paper")
    path = _entry(cache)
    digest, body = path.read_text().split("\n", 1)
    entry = json.loads(body)
    entry["key"]["qkdyn"] = "0.0.1"  # as written by another version (checksum recomputed: not damage)
    _rewrite(path, json.dumps(entry))
    assert _derive("paper") == good
    _one_warning(capsys, "another key")
    os.replace(path, derive_cache.entry_path("CACO"))  # paper's entry under CACO's name
    _derive("CACO")
    _one_warning(capsys, "another key")


@pytest.mark.parametrize("atom", [
    "__import__('os').system('touch {marker}')",
    "exp('__import__(\"os\").system(\"touch {marker}\")')",  # text where sympify would parse (and eval) it
    "Symbol('x').__class__",
    "Function('f')(Symbol('x'))",
    "(lambda: 0)()",
])
def test_a_crafted_entry_runs_nothing(atom, cache, capsys, tmp_path):
    good = _derive("paper")
    path = _entry(cache)
    marker = tmp_path / "marker"
    entry = json.loads(path.read_text().split("\n", 1)[1])
    entry["nodes"][0] = atom.format(marker=marker)
    _rewrite(path, json.dumps(entry))
    assert _derive("paper") == good
    _one_warning(capsys, "is unreadable")
    assert not marker.exists()


def test_a_node_naming_no_sympy_class_is_refused(cache, capsys):
    good = _derive("paper")
    path = _entry(cache)
    entry = json.loads(path.read_text().split("\n", 1)[1])
    call = next(i for i, node in enumerate(entry["nodes"]) if isinstance(node, list))
    entry["nodes"][call][0] = "eval"
    _rewrite(path, json.dumps(entry))
    assert _derive("paper") == good
    _one_warning(capsys, "not a sympy class")


def test_a_link_or_another_users_entry_is_not_read(cache, capsys, tmp_path):
    _derive("paper")
    path = _entry(cache)
    elsewhere = tmp_path / "elsewhere.json"
    os.replace(path, elsewhere)
    path.symlink_to(elsewhere)
    _derive("paper")
    _one_warning(capsys, "is a link")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chown(path, 12345, 12345)
        _derive("paper")
        _one_warning(capsys, "owned by uid 12345")


def test_an_unwritable_cache_is_said_once_and_derive_still_answers(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("QKDYN_CACHE", str(blocker))  # derive/ cannot be made under a file
    monkeypatch.setattr(derive_cache, "_said", [])
    assert _derive("paper").param == "paper"
    _derive("paper")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write derive's cache" in err


def test_the_key_names_the_versions_and_the_sources(cache, monkeypatch):
    before = derive_cache.entry_path("CACO")
    assert before != derive_cache.entry_path("FAFO") != derive_cache.entry_path(RANK2)
    monkeypatch.setattr(derive_cache, "source_digest", lambda: "another source")
    assert derive_cache.entry_path("CACO") != before
    monkeypatch.setattr(sp, "__version__", "0.0")
    assert derive_cache.key("CACO")["sympy"] == "0.0"


@pytest.mark.parametrize("expr", [
    sp.Symbol("x", real=True) ** sp.Rational(-3, 2) + sp.pi * sp.Float("0.1", 30) - 7,
    sp.Integral(sp.exp(-sp.Symbol("y") ** 2), (sp.Symbol("y"), 0, sp.oo)),
    sp.Eq(sp.Symbol("a"), sp.log(sp.Symbol("b", positive=True)) + sp.I),
])
def test_parse_srepr_reads_what_srepr_writes(expr):
    assert derive_cache.parse_srepr(sp.srepr(expr)) == expr


@pytest.mark.parametrize("text", [
    "Add(Symbol('x'), 'y')",                 # text outside a name or a float's digits
    "Float('1+__import__(\"os\")')",         # a float's digits only
    "Symbol('x', **{'real': True})",
    "os.system('true')", "Integer(1).__class__", "print(1)", "[x for x in ()]", "Add(", "(" * 100_000,
])
def test_parse_srepr_refuses_anything_else(text):
    with pytest.raises(ValueError):
        derive_cache.parse_srepr(text)


def test_the_public_derive_uses_the_cache(cache):
    """qkdyn.derive is derive: its per-process cache above the disk's."""
    assert qkdyn.derive is derived.derive
    derived.derive.cache_clear()
    try:
        first = qkdyn.derive("paper")
        assert derived.Derived(**derive_cache.read(derive_cache.entry_path("paper"), "paper")) == first
        assert qkdyn.derive("paper") is first
    finally:
        derived.derive.cache_clear()


def test_without_a_cache_folder_nothing_is_kept(monkeypatch, capsys):
    """No QKDYN_CACHE and no home folder (a bare container): derive answers, and writes nowhere."""
    monkeypatch.delenv("QKDYN_CACHE", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(derive_cache.Path, "home", staticmethod(no_home))
    assert derive_cache.folder() is None and derive_cache.entry_path("paper") is None
    assert _derive("paper").param == "paper"
    assert capsys.readouterr().err == ""


def test_reading_builds_the_derived_objects_node_for_node():
    """Sums, products, powers, functions and relations are read back unevaluated (their class takes
    ``evaluate``), the rest (here Integral and Tuple, in FACO's line) evaluated: every field is the derived
    object itself, down to its printed structure."""
    d = qkdyn.derive("FACO")
    fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(d) if f.name != "spec"}
    encoded = derive_cache.encode(fields)
    classes = {node[0] for node in encoded["nodes"] if isinstance(node, list)}
    assert {"Add", "Mul", "Pow", "exp", "Equality"} <= classes and {"Integral", "Tuple"} <= classes  # both paths
    decoded = derive_cache.decode(encoded, "FACO")
    assert decoded == fields
    assert {name: sp.srepr(value) for name, value in decoded.items()} == {
        name: sp.srepr(value) for name, value in fields.items()}
