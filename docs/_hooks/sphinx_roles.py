"""griffe extension (mkdocs.yml: mkdocstrings' ``extensions``): the docstrings' Sphinx markup as the site's.

The docstrings are written for ``help()`` and Sphinx: roles (:class:`Setting`,
:func:`~qkdyn.theory.derived.derive`, :meth:`to_pandas`, ``:mod:``, ``:data:``, ``:attr:``, ``:exc:``)
and literal-block markers (``Example::``), which Markdown would show as literal text. Once griffe has
loaded the package, every docstring's role becomes a mkdocs-autorefs cross-reference: its target
resolved in the scope of the object that holds the docstring (its members, the names its module
imports, its parents'), an alias followed to the object it names; the text shown is the target as
written (its last part with ``~``). The reference is ``optional``: a target the site does not render
(a private helper, a module the reference leaves out) shows as code, without a link, instead of
failing the strict build. A line's closing ``::`` becomes ``:`` (the indented block after it is a code
block in Markdown as it is), and a ``::`` alone on its line goes.
"""
from __future__ import annotations

import html
import re

import griffe

#: a Sphinx role: :kind:`target`, :kind:`~target` (show the last part), :kind:`!target` (no link)
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj):`(?P<bang>!)?(?P<tilde>~)?(?P<target>[\w.]+)`")
#: a reST literal-block marker closing a line: "text::" -> "text:", a lone "::" goes
MARKER = re.compile(r"(?m)(?P<before>\S?)[ \t]*::[ \t]*$")


def resolve(obj: griffe.Object | griffe.Alias, target: str) -> str | None:
    """The path of the object ``target`` names in ``obj``'s scope (aliases followed), or None."""
    head, _, rest = target.partition(".")
    try:
        path = obj.resolve(head)
    except griffe.NameResolutionError:
        if head != obj.package.name:
            return None
        path = head
    full = f"{path}.{rest}" if rest else path
    try:
        found = obj.package[full.split(".", 1)[1]] if "." in full else obj.package
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return full if full.startswith(f"{obj.package.name}.") else None
    return found.target_path if found.is_alias else found.path


def rewrite(obj: griffe.Object | griffe.Alias, text: str) -> str:
    """``text`` (a docstring of ``obj``) with its roles as optional autorefs and its literal markers as colons."""

    def role(match: re.Match) -> str:
        target = match["target"]
        shown = f"<code>{html.escape(target.rsplit('.', 1)[-1] if match['tilde'] else target)}</code>"
        path = None if match["bang"] else resolve(obj, target)
        return shown if path is None else f'<autoref identifier="{path}" optional>{shown}</autoref>'

    text = ROLE.sub(role, text)
    return MARKER.sub(lambda m: f"{m['before']}:" if m["before"] else "", text)


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring of the loaded package (module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        stack: list[griffe.Object | griffe.Alias] = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj, obj.docstring.value)
            stack.extend(member for member in obj.members.values() if not member.is_alias)
