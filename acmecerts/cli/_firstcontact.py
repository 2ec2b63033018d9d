"""First contact with a CA, and checks that keep bad input from costing an order.

* ``--staging``: Let's Encrypt's staging directory instead of its production one; with a
  different ``--directory`` it is bad input.
* Terms of service: a CA whose directory publishes ``meta.termsOfService`` gets a new
  account only after the user agreed to them: ``--agree-tos`` (``ACMECERTS_AGREE_TOS``,
  config key ``agree-tos``), or a yes/no question on a terminal (stdin and stderr are
  terminals, no ``--json``). Without either, the command stops with exit code 2 before
  ``newAccount`` is sent; only the directory was fetched. An account the state directory
  knows needs no agreement, nor does a stored key that has an account at the CA (looked
  up with ``onlyReturnExisting``, which creates nothing). ``termsOfServiceAgreed`` is sent
  true only after agreement.
* ``--out`` directories (and the stored ones at ``renew``) are checked before any order:
  a directory, or creatable under a writable parent; never a file.
* ``--webroot DIR``: an existing directory into which ``.well-known/acme-challenge`` can
  be written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio.to_thread

from acmecerts.errors import AccountDoesNotExist, InvalidInput
from acmecerts.protocol.directory import DirectoryUrl
from acmecerts.storage.export import export_dir_problem, unwritable_dir

if TYPE_CHECKING:
    from acmecerts.client import AcmeClient

__all__ = [
    "LETS_ENCRYPT_STAGING",
    "agree_to_terms",
    "can_prompt",
    "check_out_dir",
    "check_webroot",
    "resolve_directory",
    "terms_refused",
]

#: Let's Encrypt's staging directory (``--staging``): real validation, untrusted
#: certificates, far higher rate limits. Try a set-up there first.
LETS_ENCRYPT_STAGING: Final = "https://acme-staging-v02.api.letsencrypt.org/directory"
#: Let's Encrypt's production directory, the default CA.
LETS_ENCRYPT_PRODUCTION: Final = "https://acme-v02.api.letsencrypt.org/directory"


def resolve_directory(directory: str | None, *, staging: bool) -> DirectoryUrl:
    """The directory URL to use: ``--directory``, ``--staging`` or Let's Encrypt's, parsed
    once here (:class:`InvalidInput` for one a CA cannot have) and passed on."""
    if staging:
        given = (directory or "").strip()
        if given and given.rstrip("/") != LETS_ENCRYPT_STAGING:
            raise InvalidInput(
                f"--staging uses {LETS_ENCRYPT_STAGING}; it cannot be combined with "
                f"--directory {given}"
            )
        return DirectoryUrl(LETS_ENCRYPT_STAGING)
    return DirectoryUrl(directory if directory else LETS_ENCRYPT_PRODUCTION)


# -- terms of service -------------------------------------------------------------------------


def can_prompt(*, json_mode: bool) -> bool:
    """Whether a question can be asked: stdin and stderr are terminals, no ``--json``."""
    if json_mode:
        return False
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def terms_refused(terms_url: str, directory: str) -> InvalidInput:
    """The one-line error for an account that cannot be created without agreement."""
    return InvalidInput(
        f"the CA {directory} asks you to agree to its terms of service ({terms_url}) before "
        "an account is created: read them, then run again with --agree-tos "
        "(or ACMECERTS_AGREE_TOS=1); nothing was sent to the CA"
    )


def _ask(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):  # end of input: no answer is no agreement
        sys.stderr.write("\n")
        sys.stderr.flush()
    return answer.strip().lower() in ("y", "yes")


async def agree_to_terms(
    client: AcmeClient, *, directory: str, agreed: bool, prompt: bool, has_key: bool
) -> bool:
    """Decide whether an account may be created for ``client``; return the agreement.

    Called before the first ``newAccount`` when the state directory knows no account
    URL. Returns ``True`` when the user agreed (flag or prompt), ``False`` when the CA
    publishes no terms or the key turned out to have an account already (then
    ``client.account_url`` is set); raises :class:`InvalidInput` otherwise.
    """
    terms = (await client.directory()).terms_of_service
    if terms is None:
        return agreed
    if agreed:
        return True
    if has_key:
        # A key stored without its URL may have an account: using it needs no agreement.
        try:
            await client.find_account()
        except AccountDoesNotExist:
            pass
        else:
            return False
    if not prompt:
        raise terms_refused(terms, directory)
    question = (
        f"The CA {directory} asks you to agree to its terms of service before an account "
        f"is created:\n  {terms}\nDo you agree to them? [y/N] "
    )
    if await anyio.to_thread.run_sync(_ask, question, abandon_on_cancel=True):
        return True
    raise InvalidInput(
        f"you did not agree to the terms of service of {directory} ({terms}); no account "
        "was created and nothing was ordered"
    )


# -- directories ------------------------------------------------------------------------------


def check_out_dir(path: Path, *, option: str = "--out") -> None:
    """Raise :class:`InvalidInput` unless ``path`` is (or can be made) a writable directory
    (:func:`~acmecerts.storage.export.export_dir_problem`: tried, nothing left behind)."""
    reason = export_dir_problem(path)
    if reason is not None:
        raise InvalidInput(f"{option} {path} is unusable: {reason}")


def check_webroot(root: Path, *, option: str = "--webroot") -> Path:
    """The absolute ``--webroot``; raises :class:`InvalidInput` when files cannot go there."""
    absolute = root.expanduser().absolute()
    if not absolute.is_dir():
        what = "is not a directory" if absolute.exists() else "does not exist"
        raise InvalidInput(f"{option} {root} {what} (give the web server's document root)")
    reason = unwritable_dir(absolute / ".well-known" / "acme-challenge")
    if reason is not None:
        raise InvalidInput(f"{option} {root}: cannot write .well-known/acme-challenge: {reason}")
    return absolute
