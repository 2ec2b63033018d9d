"""``--dry-run`` of ``issue`` (and ``renew``): the whole issuance, nothing kept.

The run goes to the CA's staging directory where it has one (Let's Encrypt's production
directory: its staging directory), elsewhere to the same CA, and says which. It works in
a scratch copy of the CA's state (its account, so no new account is made where one is
stored) in a temporary directory that is removed afterwards: the state directory and
``--out`` are never written, and no deploy-hook runs (the pre- and post-hooks do, as the
real run needs them, e.g. to free the challenge port).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from acmecerts.errors import InvalidInput
from acmecerts.storage.keys import ca_slug

from ._args import CommonArgs, HookArgs
from ._firstcontact import LETS_ENCRYPT_PRODUCTION, LETS_ENCRYPT_STAGING, resolve_directory
from ._state import default_state_dir

__all__ = ["dry_run_directory", "dry_run_hooks", "run_dry"]

#: Where a dry run goes instead of a CA's production directory.
_STAGING = {LETS_ENCRYPT_PRODUCTION.rstrip("/"): LETS_ENCRYPT_STAGING}


def dry_run_directory(directory: str) -> tuple[str, str]:
    """The directory URL a dry run for ``directory`` uses, and a line saying so."""
    staging = _STAGING.get(directory.rstrip("/"))
    if staging is not None:
        return staging, f"dry run at the CA's staging directory {staging}"
    return directory, f"dry run at {directory} itself (no staging directory is known for it)"


def dry_run_hooks(hooks: HookArgs) -> HookArgs:
    """``hooks`` without any deploy-hook (nothing is deployed in a dry run)."""
    return dataclasses.replace(hooks, hooks=dataclasses.replace(hooks.hooks, deploy=""))


@contextlib.contextmanager
def _scratch_state(root: Path, directory: str) -> Iterator[Path]:
    """A temporary state directory holding a copy of ``root``'s state for ``directory``."""
    with tempfile.TemporaryDirectory(prefix="acmecerts-dry-run-") as tmp:
        scratch = Path(tmp) / "state"
        scratch.mkdir(mode=0o700)
        source = root / ca_slug(directory)
        if source.is_dir():
            shutil.copytree(source, scratch / source.name, symlinks=True)
        yield scratch


def run_dry(common: CommonArgs, run: Callable[[CommonArgs], int]) -> int:
    """Run ``run`` as a dry run: with the dry run's directory and a scratch state directory
    (see the module); the line saying where goes to stderr before."""
    try:
        wanted = resolve_directory(common.directory, staging=common.staging)
        directory, note = dry_run_directory(wanted)
        ca_slug(directory)
    except InvalidInput:  # the command reports it as always, before anything is sent
        return run(common)
    sys.stderr.write(f"acmecerts: {note}: nothing is saved or exported\n")
    root = (common.state_dir or default_state_dir()).expanduser().absolute()
    with _scratch_state(root, directory) as scratch:
        return run(
            dataclasses.replace(common, directory=directory, staging=False, state_dir=scratch)
        )
