"""Which CA of the state directory ``delete``, ``revoke`` and ``account show`` act on.

Like ``renew`` and ``status``: without ``--directory`` (or ``--staging``) every CA the
state directory holds is a candidate, each with the directory URL and ``--ca-bundle``
stored for it (``cli-settings.json``), and the command's target picks one: the CA that
holds the certificate named, or the only CA with an account. A certificate name found
at several CAs is an error naming them (exit 2, nothing sent); ``--directory`` chooses.
With ``--directory`` the command acts on that CA, with its stored ``--ca-bundle`` when
none is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from acmecerts.errors import InvalidInput
from acmecerts.manager import CaSettings, find_ca_dirs, load_ca_settings
from acmecerts.storage import FileStorage
from acmecerts.storage.keys import ca_slug

from ._args import AccountArgs, CommonArgs
from ._ca import CaPlan, plan_ca
from ._firstcontact import resolve_directory
from ._interrupt import run_interruptible
from ._renew import ca_dirs, ca_settings, stored_plan
from ._report import log

__all__ = ["StateCas", "ambiguous", "state_cas"]


@dataclasses.dataclass(frozen=True, slots=True)
class StateCas:
    """The CAs a command may act on."""

    #: The state directory.
    root: Path
    #: One plan per CA, each with its stored ``--ca-bundle`` (one: ``--directory``).
    plans: list[CaPlan]
    #: ``--directory`` or ``--staging`` named the CA.
    chosen: bool
    #: The plan for ``--directory`` (else Let's Encrypt's) whatever the state directory
    #: holds: for a target that names no CA of its own (a foreign certificate file).
    default: CaPlan


async def _stored_settings(root: Path, directory: str) -> CaSettings | None:
    """The settings stored for ``directory``'s CA in ``root``, if it has any."""
    slug = ca_slug(directory)
    if not (root / slug).is_dir():
        return None
    async with FileStorage(root) as storage:
        settings = await load_ca_settings(storage, slug)
    return settings if settings is not None and settings.directory == directory else None


def _has_cas(root: Path) -> bool:
    try:
        return root.is_dir() and bool(find_ca_dirs(root))
    except OSError:
        return True  # unreadable: ca_dirs says so


def state_cas(
    common: CommonArgs,
    account: AccountArgs | None = None,
    *,
    json_mode: bool,
    empty_ok: bool = False,
) -> StateCas:
    """The CAs of the state directory (``--directory``/``--staging``: that one).

    Every option is validated first. Without ``--directory``, a state directory that is
    missing, unreadable or holds no CA is :class:`InvalidInput` (as for ``renew``),
    unless ``empty_ok``: then there is no plan (the caller falls back to
    :attr:`StateCas.default`). A CA directory that cannot be used is a warning.
    """
    directory = resolve_directory(common.directory, staging=common.staging)
    resolved = dataclasses.replace(common, directory=directory, staging=False)
    account = account or AccountArgs()
    default = plan_ca(resolved, account)
    root = default.state.root
    if common.only_directory:
        settings = run_interruptible(lambda: _stored_settings(root, directory), json_mode=json_mode)
        plan = default if settings is None else stored_plan(resolved, account, settings, 120.0)
        return StateCas(root, [plan], chosen=True, default=plan)
    if empty_ok and not _has_cas(root):
        return StateCas(root, [], chosen=False, default=default)
    slugs = ca_dirs(root)
    found, problems = run_interruptible(lambda: ca_settings(root, slugs), json_mode=json_mode)
    for problem in problems:
        log.warning("%s", problem)
    if not found:
        raise InvalidInput(problems[0])
    plans = [stored_plan(resolved, account, settings, 120.0) for settings in found]
    return StateCas(root, plans, chosen=False, default=default)


def ambiguous(what: str, root: Path, plans: Sequence[CaPlan]) -> InvalidInput:
    """The error for a target found at several CAs of the state directory."""
    listed = ", ".join(plan.directory for plan in plans)
    return InvalidInput(
        f"{what} is at several CAs in {root}: {listed}; give --directory URL to choose one "
        "(nothing was sent)"
    )
