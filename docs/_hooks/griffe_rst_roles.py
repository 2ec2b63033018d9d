"""A griffe extension: reST roles in docstrings become Markdown for the API reference.

The package's docstrings use Sphinx roles (``:class:`~acmecerts.X```, ``:meth:`issue```,
``:func:``...) and reST literals (````code````). mkdocstrings renders Markdown, so before
a docstring is parsed, a role naming a full dotted path becomes a link (when the reference
shows that object; plain code otherwise), other roles become inline code, and double
backquotes become single ones.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):`(?P<target>[^`]+)`")
_LITERAL = re.compile(r"``(?P<code>[^`]+?)``")


def _role(match: re.Match[str]) -> str:
    target = match["target"].strip()
    title, _, explicit = target.partition(" <")
    if explicit:  # :class:`title <path>`
        return _link(explicit.rstrip(">").lstrip("~."), title)
    short = target.startswith("~")
    path = target.lstrip("~.")
    return _link(path, path.rsplit(".", 1)[-1] if short else path)


def _link(path: str, label: str) -> str:
    """A link to ``path`` where the reference documents it, else just inline code."""
    if not path.startswith("acmecerts."):
        return f"`{label}`"
    # an optional autoref: objects the reference does not show render as plain code
    return f'<autoref identifier="{path}" optional><code>{label}</code></autoref>'


def rst_to_markdown(text: str) -> str:
    """Roles and literals of ``text`` as Markdown."""
    return _LITERAL.sub(lambda m: f"`{m['code']}`", _ROLE.sub(_role, text))


class RstRoles(griffe.Extension):
    """Rewrites every docstring before mkdocstrings parses it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
