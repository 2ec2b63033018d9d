"""Option values converted without pydantic where typer's conversion would give them as they are.

Recent typer converts each option's value through a pydantic ``TypeAdapter`` it builds for
the option on first use. The first one built imports pydantic's schema machinery: about
0.1 s of CPU at every ``issue`` or ``renew``, before anything is sent to the CA. Most
values need none of it: a string option given a string, a number option's default, a path,
``ACMECERTS_AGREE_TOS=1``, a ``--log-format`` of one of its choices, a repeatable option
not given. :func:`plain_value` converts those the way typer's adapter does and answers
:data:`NOT_PLAIN` for everything else (then typer converts, as before, with its messages
for values it refuses). tests/cli/test_cli_plain_values.py holds both conversions equal
for every option of every command.
"""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path
from typing import Any, Final

__all__ = ["NOT_PLAIN", "plain_value"]

#: :func:`plain_value`'s answer when typer must convert the value itself.
NOT_PLAIN: Final = object()

_DIGITS = re.compile(r"[0-9]{1,18}")
_DECIMAL = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,15})?")
# What pydantic reads as a bool (after typer has stripped the value; "" is False).
_BOOLS: Final = {
    **dict.fromkeys(("1", "on", "t", "true", "y", "yes"), True),
    **dict.fromkeys(("0", "off", "f", "false", "n", "no"), False),
}
# Typer's path options as declared by default: no check asked for but readability.
_PLAIN_PATH: Final = {
    "exists": False,
    "file_okay": True,
    "dir_okay": True,
    "writable": False,
    "readable": True,
    "resolve_path": False,
    "allow_dash": False,
    "path_type": None,
}


def plain_value(param: Any, ctx: Any, value: Any) -> Any:
    """``value`` as typer would convert it for ``param``, or :data:`NOT_PLAIN`."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return NOT_PLAIN
    info = descriptor.parameter_info
    if info.parser is not None or descriptor.file_annotation is not None:
        return NOT_PLAIN
    annotation = descriptor.annotation
    if param.multiple or param.nargs == -1:
        if value is None:
            return ()
        if (
            annotation == list[str]
            and isinstance(value, list | tuple)
            and all(type(item) is str for item in value)
        ):
            return list(value)
        return NOT_PLAIN
    if param.nargs != 1:
        return NOT_PLAIN
    if value is None:
        return None
    if info.min is not None or info.max is not None or info.clamp:
        return NOT_PLAIN
    if type(value) is str:
        return _from_text(annotation, info, ctx, value)
    if type(value) is annotation and annotation in (int, float):
        return value
    return NOT_PLAIN


def _from_text(annotation: Any, info: Any, ctx: Any, value: str) -> Any:
    if annotation is str:
        return value
    if annotation is int and _DIGITS.fullmatch(value):
        return int(value)
    if annotation is float and _DECIMAL.fullmatch(value):
        return float(value)
    if annotation is bool:
        stripped = value.strip()
        return _BOOLS.get(stripped.lower(), NOT_PLAIN) if stripped else False
    if annotation is Path:
        return _path(info, value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _choice(annotation, info, ctx, value)
    return NOT_PLAIN


def _path(info: Any, value: str) -> Any:
    if not value or "\0" in value:
        return NOT_PLAIN
    if any(getattr(info, name) != default for name, default in _PLAIN_PATH.items()):
        return NOT_PLAIN
    path = Path(value)
    try:
        os.stat(path)
    except OSError:
        return path  # need not exist
    if not os.access(path, os.R_OK):
        return NOT_PLAIN  # typer refuses it, in its words
    return path


def _choice(annotation: type[enum.Enum], info: Any, ctx: Any, value: str) -> Any:
    if ctx is not None and ctx.token_normalize_func is not None:
        return NOT_PLAIN
    members = list(annotation)
    wanted = value if info.case_sensitive else value.casefold()
    for member in members:  # typer takes the first choice that matches
        name = str(member.value)
        if (name if info.case_sensitive else name.casefold()) == wanted:
            return member
    return NOT_PLAIN
