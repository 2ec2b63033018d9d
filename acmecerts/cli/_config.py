"""Configuration: flags, then ``ACMECERTS_*`` environment variables, then a TOML file.

Every option can be set in all three places; the first that sets it wins:

1. the command line (``--state-dir /srv/acme``);
2. the environment: ``ACMECERTS_`` and the option name in capitals with ``_`` for ``-``
   (``ACMECERTS_STATE_DIR=/srv/acme``; repeatable options take space-separated values);
3. the configuration file: ``--config PATH`` (or ``$ACMECERTS_CONFIG``), else the first
   of these that exists: ``/etc/acmecerts/config.toml`` (only for root, effective uid 0),
   ``$XDG_CONFIG_HOME/acmecerts/config.toml`` (``~/.config/acmecerts/config.toml``).
   A default file that cannot be read (its directory or the file itself not readable by
   the user) counts as absent; one named by ``--config`` or ``$ACMECERTS_CONFIG`` that
   cannot be read is an error (exit 2, one line).
   Keys are option names without the dashes::

       directory = "https://acme-staging-v02.api.letsencrypt.org/directory"
       email = ["admin@example.com"]
       state-dir = "/var/lib/acmecerts"
       challenge = "dns-01"
       dns-hook = "/usr/local/bin/update-dns"

       [issue]                  # only for `acmecerts issue`
       concurrency = 4

       [account.rollover]       # only for `acmecerts account rollover`
       key-type = "ec384"

   Top-level keys apply to every command that has the option (and are ignored by the
   others); a table applies to one command or command group. An unknown key is an error.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acmecerts.errors import InvalidInput

__all__ = [
    "ENV_PREFIX",
    "SYSTEM_CONFIG",
    "config_default_map",
    "find_config_path",
    "load_config",
]

ENV_PREFIX = "ACMECERTS_"
#: The configuration file of the superuser (euid 0), read when it exists.
SYSTEM_CONFIG = Path("/etc/acmecerts/config.toml")
#: Options that are not settings (they act at once or name the file itself).
_NOT_SETTINGS = frozenset({"help", "version", "config"})


def find_config_path(
    args: Sequence[str],
    environ: Mapping[str, str] | None = None,
    *,
    euid: int | None = None,
    system_config: Path = SYSTEM_CONFIG,
) -> tuple[Path | None, bool]:
    """The configuration file to read, and whether it was asked for explicitly.

    ``--config PATH`` (anywhere before ``--``) wins over ``$ACMECERTS_CONFIG``; without
    either, the first default that exists: for root (effective uid 0; ``euid`` defaults
    to :func:`os.geteuid`) ``system_config`` (``/etc/acmecerts/config.toml``), then for
    everyone ``$XDG_CONFIG_HOME/acmecerts/config.toml``.
    """
    env = os.environ if environ is None else environ
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--config":
            if index + 1 >= len(args):
                raise InvalidInput("--config needs a PATH")
            return Path(args[index + 1]).expanduser(), True
        if arg.startswith("--config="):
            return Path(arg.partition("=")[2]).expanduser(), True
    if env.get(f"{ENV_PREFIX}CONFIG"):
        return Path(env[f"{ENV_PREFIX}CONFIG"]).expanduser(), True
    if (os.geteuid() if euid is None else euid) == 0 and _readable_file(system_config):
        return system_config, False
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"
    default = base / "acmecerts" / "config.toml"
    return (default if _readable_file(default) else None), False


def _readable_file(path: Path) -> bool:
    """Whether a default configuration file is there to be read.

    One that cannot be reached or read (``HOME=/root`` for another user: ``/root`` is
    0700) counts as absent, as a missing one does; a path given explicitly is read
    whatever, and :func:`load_config` names it when that fails.
    """
    try:
        return path.is_file() and os.access(path, os.R_OK)
    except OSError:  # PermissionError from stat() on a directory that cannot be searched
        return False


def load_config(path: Path) -> dict[str, Any]:
    """Read and parse the TOML file (one-line :class:`InvalidInput` when it cannot be used)."""
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise InvalidInput(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"config file {path} is not valid TOML: {exc}") from exc


# Duck-typed click objects: typer uses click, or (typer >= 0.24) its own copy of it.
Command = Any
Option = Any


def _subcommands(command: Command) -> dict[str, Command]:
    commands = getattr(command, "commands", None)
    return dict(commands) if isinstance(commands, Mapping) else {}


def _settings(command: Command) -> dict[str, Option]:
    """The command's options by config key (``state-dir``), settings only."""
    found: dict[str, Option] = {}
    for param in command.params:
        if getattr(param, "param_type_name", None) != "option":
            continue
        for opt in param.opts:
            if opt.startswith("--"):
                key = opt[2:]
                if key not in _NOT_SETTINGS:
                    found[key] = param
    return found


def _all_keys(command: Command) -> set[str]:
    keys = set(_settings(command))
    for sub in _subcommands(command).values():
        keys |= _all_keys(sub)
    return keys


def _normalise(key: str) -> str:
    return key.replace("_", "-").lower()


def _value(option: Option, value: Any, where: str) -> Any:
    """Check a value from the file against the option's kind (so the error names the file)."""

    def bad(kind: str) -> InvalidInput:
        return InvalidInput(f"{where} must be {kind}, not {value!r}")

    if isinstance(value, dict):
        raise bad("a value")
    default = getattr(option, "default", None)
    if getattr(option, "is_flag", False):
        if not isinstance(value, bool):
            raise bad("true or false")
    elif getattr(option, "count", False) or (
        isinstance(default, int) and not isinstance(default, bool)
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
    elif getattr(option, "multiple", False):
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise bad("a string or a list of strings")
        return values
    elif not isinstance(value, str):
        raise bad("a string")
    return value


def _build(
    command: Command,
    inherited: Mapping[str, tuple[Any, str]],
    table: Mapping[str, Any],
    *,
    path: Path,
    where: str,
) -> dict[str, Any]:
    """The click ``default_map`` of ``command`` from inherited keys and its own table.

    ``inherited`` maps a normalised key to its value and where the file set it.
    """
    own_values = {k: v for k, v in table.items() if not isinstance(v, dict)}
    sub_tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    known = _all_keys(command)
    for key in own_values:
        if _normalise(key) not in known:
            raise InvalidInput(f"config file {path}: unknown setting {where + key!r}")
    merged = dict(inherited)
    merged.update({_normalise(k): (v, where + k) for k, v in own_values.items()})
    result: dict[str, Any] = {}
    for key, option in _settings(command).items():
        if key in merged and option.name is not None:
            value, origin = merged[key]
            result[option.name] = _value(option, value, f"config file {path}: {origin}")
    subcommands = _subcommands(command)
    if subcommands:
        for name in sub_tables:
            if name not in subcommands:
                raise InvalidInput(f"config file {path}: unknown command table [{where}{name}]")
        for name, sub in subcommands.items():
            result[name] = _build(
                sub, merged, sub_tables.get(name, {}), path=path, where=f"{where}{name}."
            )
    elif sub_tables:
        name = next(iter(sub_tables))
        raise InvalidInput(f"config file {path}: unknown setting {where + name!r}")
    return result


def config_default_map(root: Command, document: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Turn a parsed config file into click's ``default_map`` for every command.

    click then applies the precedence by itself: command line, environment variable,
    ``default_map``, the option's default.
    """
    # The root is a group like ``account``: its keys are inherited by every command.
    return _build(root, {}, document, path=path, where="")
