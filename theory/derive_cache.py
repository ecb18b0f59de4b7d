"""``qkdyn.derive``'s results on disk, shared by every process: data, never code.

Deriving a form costs seconds of sympy (a spec's far more); every process used to pay it again. An
entry holds one result's fields as JSON (:func:`encode`): its sympy objects as one table of shared
nodes, each atom as its ``srepr`` text (read back by :func:`parse_srepr`, a parser of that one grammar:
calls of sympy's classes with numbers, and text only where a symbol's name or a float's digits go) and
each other node as its class's name and its children's ids (rebuilt as ``class(*children)``, the class
one of sympy's or of :mod:`qkdyn.theory.functions`). Nothing in an entry is evaluated as Python, and
nothing is unpickled.

* Where: ``$QKDYN_CACHE/derive`` or ``~/.cache/qkdyn/derive`` (the project's cache folder, the one
  ``qkdyn data`` uses), one file per result, named by the sha256 of its key: what was derived (a form's
  name or a spec's fields), the qkdyn and sympy versions and the sha256 of the ``theory/`` sources
  (:func:`source_digest`). A change to any of them is a new name, so a stale entry is never read.
* Verified: the file's first line is the sha256 of the rest; the rest repeats the key, which must
  equal the one asked for; the file must be a regular file owned by this user (or root). An entry
  that fails any check (truncated, edited, written for another key, another user's) is ignored with
  one line on stderr, derived again and replaced.
* Written only when it reads back equal to what was derived (every field, sympy's structural
  equality), atomically (:mod:`qkdyn.atomic`). Where the folder cannot be written the result is
  simply not kept (said once per process).
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qkdyn.errors import InputError

#: the layout of an entry; a change to it is a change of key
FORMAT = 1
#: an entry larger than this is not one of ours (a coupled spec's is a few MB)
MAX_ENTRY_BYTES = 256 << 20
#: owners whose entries are read: this user and root (None where there are no POSIX owners)
_OWNERS = (os.geteuid(), 0) if hasattr(os, "geteuid") else None
#: the digits of a sympy Float's first argument in srepr
_FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|[-+]?inf|nan")
#: classes whose first argument is text: a symbol's name, a float's digits
_NAMED = {"Symbol", "Dummy"}
_said: list[str] = []  # the folder of this process's one "cannot write" line, once said


def folder() -> Path | None:
    """``$QKDYN_CACHE/derive``, else ``~/.cache/qkdyn/derive``; None where neither is set and there is no
    home folder (then nothing is cached)."""
    if "QKDYN_CACHE" in os.environ:
        return Path(os.environ["QKDYN_CACHE"]) / "derive"
    try:
        return Path.home() / ".cache" / "qkdyn" / "derive"
    except RuntimeError:  # no HOME and no entry in the password database
        return None


@functools.cache
def source_digest() -> str:
    """sha256 over the names and bytes of the ``theory/`` modules (this file's folder, not ``generated/``):
    any change to the code that derives is a change of key."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def key(param) -> dict:
    """What identifies one result: what was derived, the layout, the versions and the sources."""
    import sympy

    from qkdyn import __version__

    what = {"param": param} if isinstance(param, str) else {"spec": dataclasses.asdict(param)}
    return {**what, "format": FORMAT, "qkdyn": __version__, "sympy": sympy.__version__, "source": source_digest()}


def entry_path(param) -> Path | None:
    """The file of ``param``'s entry, named by the sha256 of its :func:`key` (None: no :func:`folder`)."""
    where = folder()
    text = json.dumps(key(param), sort_keys=True)
    return None if where is None else where / f"{hashlib.sha256(text.encode()).hexdigest()[:40]}.json"


def cached(param, compute: Callable[[], dict]) -> dict:
    """The fields of ``param``'s result (a form's name or a Spec): read from its entry, or ``compute()``d
    and stored (module docstring). ``compute`` returns the fields as a dict of sympy objects, text,
    dicts, tuples and :class:`~qkdyn.theory.specclosed.LineCoordinate`."""
    path = entry_path(param)
    found = None if path is None else read(path, param)
    if found is not None:
        return found
    fields = compute()
    if path is not None:
        write(path, param, fields)
    return fields


def read(path: Path, param) -> dict | None:
    """The fields in the entry ``path`` if it verifies for ``param``; None if there is none; an entry that
    fails a check is one line on stderr and None."""
    found = _verified(path, param)
    if isinstance(found, str):
        sys.stderr.write(f"qkdyn: warning: derive's cache entry {path} {found}; deriving it again\n")
        return None
    return found


def _verified(path: Path, param) -> dict | str | None:
    """The fields of the entry ``path`` for ``param``, None where there is none, or what is wrong with it."""
    from qkdyn import jsonio
    from qkdyn.inputs import read_bytes

    try:
        status = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if not stat.S_ISREG(status.st_mode):
        return "is a link or not a plain file"
    if _OWNERS is not None and status.st_uid not in _OWNERS:
        return f"is owned by uid {status.st_uid}, neither this user nor root"
    try:
        digest, _, body = read_bytes(path, MAX_ENTRY_BYTES, "derive cache").partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode() != digest:
            return "fails its checksum (truncated or edited)"
        entry = jsonio.loads(body.decode("utf-8"), str(path))
        if not isinstance(entry, dict) or entry.get("key") != json.loads(json.dumps(key(param))):
            return "was written for another key (another version, source or input)"
        return decode(entry, param)
    except Exception as error:  # noqa: BLE001 (whatever a damaged entry raises: it is derived again)
        return f"is unreadable ({type(error).__name__}: {str(error)[:80]})"


def write(path: Path, param, fields: dict) -> None:
    """Store ``fields`` as ``param``'s entry, where they read back equal (else nothing is stored)."""
    from qkdyn.atomic import write_text

    try:
        encoded = encode(fields)
        exact = decode(encoded, param) == fields
    except TypeError:  # an object of a class the nodes cannot name
        exact = False
    if not exact:
        return  # deriving again is right, a wrong entry is not
    body = json.dumps({"key": key(param), **encoded}, separators=(",", ":"))
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_text(path, hashlib.sha256(body.encode()).hexdigest() + "\n" + body)
    except (OSError, InputError) as error:
        if not _said:
            _said.append(str(path.parent))
            sys.stderr.write(f"qkdyn: warning: cannot write derive's cache in {path.parent} ({error}); each process "
                             "derives again (set QKDYN_CACHE to a writable folder)\n")


def encode(fields: dict) -> dict:
    """``fields`` as JSON: ``{"nodes": [...], "fields": {...}}``. Every sympy object of every field is one
    table of shared nodes, children before parents (the derivatives of a Jacobian repeat the same terms
    many times): an atom (no args) is its ``srepr`` text, anything else ``[class name, child ids...]``,
    rebuilt as ``class(*children)`` (sympy's invariant ``expr.func(*expr.args) == expr``; read back unevaluated
    where the class takes ``evaluate``, :func:`_call`), or, for a node
    built unevaluated (``Mul(1/10, 10 k - q)``, which evaluation would distribute), ``{"unevaluated":
    [class name, child ids...]}``, rebuilt as ``class(*children, evaluate=False)``. In the fields a
    sympy object is ``{"sympy": id}``, a matrix ``{"matrix": class name, "rows": [[id, ...], ...]}``, a
    dict ``{"dict": [[key, value], ...]}``, a tuple ``{"tuple": [...]}``, a line coordinate
    ``{"line": circuit}``; text is itself."""
    nodes: list = []
    ids: dict = {}
    return {"fields": {name: _encode(value, nodes, ids) for name, value in fields.items()}, "nodes": nodes}


def _encode(value: Any, nodes: list, ids: dict) -> Any:
    import sympy as sp
    from qkdyn.theory.specclosed import LineCoordinate

    if isinstance(value, sp.MatrixBase):
        return {"matrix": _class_name(value, sp.MatrixBase),
                "rows": [[_node(entry, nodes, ids) for entry in value.row(i)] for i in range(value.rows)]}
    if isinstance(value, sp.Basic):
        return {"sympy": _node(value, nodes, ids)}
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {"dict": [[_encode(k, nodes, ids), _encode(v, nodes, ids)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"tuple": [_encode(item, nodes, ids) for item in value]}
    if isinstance(value, LineCoordinate):
        return {"line": value.circuit}
    raise TypeError(f"derive's cache cannot store a {type(value).__name__}")


def _class_name(value, base) -> str:
    """The name under which :func:`_names` finds ``value``'s class (a TypeError where it does not)."""
    name = type(value).__name__
    if _names().get(name) is not type(value) or not issubclass(type(value), base):
        raise TypeError(f"derive's cache cannot store a {name}")
    return name


def _node(expr, nodes: list, ids: dict) -> int:
    """The id of ``expr``'s node, added with its children where not yet in the table."""
    import sympy as sp

    found = ids.get(expr)
    if found is None:
        if expr.args:
            if expr.func is not type(expr):
                raise TypeError(f"derive's cache cannot store a {type(expr).__name__}")
            call = [_class_name(expr, sp.Basic), *(_node(arg, nodes, ids) for arg in expr.args)]
            node = call if expr.func(*expr.args) == expr else {"unevaluated": call}
        else:
            node = sp.srepr(expr)
        found = ids[expr] = len(nodes)
        nodes.append(node)
    return found


def decode(entry: dict, param) -> dict:
    """The fields of an :func:`encode`d ``entry``; a line coordinate gets ``param`` (its spec) back.
    Anything that is not such an entry is a ValueError."""
    built: list = []
    for node in entry["nodes"]:
        if isinstance(node, str):
            built.append(parse_srepr(node))
        elif isinstance(node, dict) and list(node) == ["unevaluated"]:
            built.append(_call(node["unevaluated"], built, evaluate=False))
        else:
            built.append(_call(node, built, evaluate=None))
    return {name: _decode(value, built, param) for name, value in entry["fields"].items()}


def _call(node, built: list, evaluate: bool | None):
    """``[class name, child ids...]`` built from the nodes before it: unevaluated (``evaluate=False``, a node
    written so), or (None) as ``class(*children)``. Such a node equals its own evaluation (:func:`_node` writes
    it only then), so where its class takes ``evaluate`` it is built unevaluated: the same args, the same
    object, without sympy's canonicalisation of sums and products (about 4x less time to read an entry)."""
    import sympy as sp

    if not (isinstance(node, list) and node and isinstance(node[0], str)):
        raise ValueError(f"not a node: {str(node)[:60]}")
    cls = _names().get(node[0])
    if not (isinstance(cls, type) and issubclass(cls, sp.Basic)):
        raise ValueError(f"not a sympy class: {node[0][:40]!r}")
    children = (built[_id(child, len(built))] for child in node[1:])
    if evaluate is False or issubclass(cls, _take_evaluate()):
        return cls(*children, evaluate=False)
    return cls(*children)


@functools.cache
def _take_evaluate() -> tuple[type, ...]:
    """The sympy classes whose constructor takes ``evaluate=False`` and then keeps its arguments as given:
    sums and products, powers, functions, relations (not e.g. ``Tuple`` or ``Integral``)."""
    import sympy as sp
    from sympy.core.function import Application
    from sympy.core.operations import AssocOp
    from sympy.core.relational import Relational

    return AssocOp, sp.Pow, Application, Relational


def _id(value, count: int) -> int:
    if type(value) is not int or not 0 <= value < count:
        raise ValueError(f"not the id of an earlier node: {str(value)[:20]}")
    return value


def _decode(value: Any, built: list, param) -> Any:
    import sympy as sp

    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (tag, content), = value.items()
        if tag == "sympy":
            return built[_id(content, len(built))]
        if tag == "dict" and isinstance(content, list):
            return {_decode(k, built, param): _decode(v, built, param) for k, v in content}
        if tag == "tuple" and isinstance(content, list):
            return tuple(_decode(item, built, param) for item in content)
        if tag == "line" and content in ("QK", "OV") and not isinstance(param, str):
            from qkdyn.theory.specclosed import LineCoordinate

            return LineCoordinate(param, content)
    if isinstance(value, dict) and set(value) == {"matrix", "rows"} and isinstance(value["rows"], list):
        cls = _names().get(value["matrix"])
        if isinstance(cls, type) and issubclass(cls, sp.MatrixBase):
            return cls([[built[_id(i, len(built))] for i in row] for row in value["rows"]])
    raise ValueError(f"not a field of derive's cache: {str(value)[:60]}")


@functools.cache
def _names() -> dict[str, Any]:
    """What an srepr may name: sympy's expression and matrix classes and singletons (pi, oo, ...), and
    the functions of :mod:`qkdyn.theory.functions`."""
    import sympy as sp
    from qkdyn.theory import functions

    names = {name: value for name, value in vars(sp).items()
             if (isinstance(value, type) and issubclass(value, (sp.Basic, sp.MatrixBase))) or isinstance(value, sp.Basic)}
    names.update({name: value for name, value in vars(functions).items()
                  if isinstance(value, type) and issubclass(value, sp.Function) and value.__module__ == functions.__name__})
    return names


def parse_srepr(text: str):
    """The sympy object ``sympy.srepr`` printed as ``text``, built without evaluating any Python: only
    calls of the classes of :func:`_names` (with numbers, lists, tuples and such calls as arguments;
    text only as the name of a Symbol or Dummy or the digits of a Float) and its singletons. Anything
    else is a ValueError."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as error:
        raise ValueError(f"not sympy's srepr ({type(error).__name__})") from None
    return _build(tree.body)


def _build(node: ast.AST):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        number = node.operand.value
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return -number
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_build(item) for item in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Name) and not isinstance(_names().get(node.id), (type, type(None))):
        return _names()[node.id]  # a singleton: pi, E, oo, zoo, nan, I, true, false, ...
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and isinstance(_names().get(node.func.id), type):
        name = node.func.id
        args = [_text(node.args[0], name) if i == 0 and name in (*_NAMED, "Float") else _build(arg)
                for i, arg in enumerate(node.args)]
        options = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ValueError("** arguments are not srepr")
            options[keyword.arg] = _build(keyword.value)
        return _names()[name](*args, **options)
    raise ValueError(f"not sympy's srepr: {ast.dump(node)[:80]}")


def _text(node: ast.AST, name: str) -> str:
    """The text argument of a Symbol or Dummy (any name) or a Float (its digits only)."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        raise ValueError(f"{name} takes text first in srepr")
    if name == "Float" and not _FLOAT_TEXT.fullmatch(node.value):
        raise ValueError(f"not a float's digits: {node.value[:40]!r}")
    return node.value
