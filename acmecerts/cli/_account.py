"""``acmecerts account show|create|rollover|deactivate``.

Each finds its CA in the state directory as ``delete`` and ``revoke`` do
(:func:`account_ca`): no ``--directory`` or ``--ca-bundle`` is needed for the account of
the only CA that has one.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.text import Text

from acmecerts.client import AcmeClient
from acmecerts.errors import AccountDoesNotExist, InvalidInput
from acmecerts.manager import deactivate_stored_account, roll_over_account_key
from acmecerts.protocol.keys import AccountKey, KeyType
from acmecerts.protocol.resources import Account

from ._args import AccountArgs, CommonArgs
from ._ca import CaPlan, open_client
from ._constants import ExitCode
from ._findca import StateCas, ambiguous, state_cas
from ._interrupt import run_interruptible
from ._report import Report, run_guarded
from ._state import State

__all__ = ["account_ca", "run_account"]


def _account_json(account: Account, key: AccountKey, state: State) -> dict[str, Any]:
    return {
        "url": account.url,
        "account_status": account.status,
        "contact": list(account.contact),
        "orders": account.orders,
        "thumbprint": key.thumbprint,
        "algorithm": key.algorithm.name,
        "key": state.path_for(state.layout.account_key()),
    }


def run_account(
    action: str,
    *,
    common: CommonArgs,
    account: AccountArgs | None = None,
    key_type: str = "ec256",
    confirmed: bool = False,
) -> int:
    """Run ``acmecerts account ACTION``; return the exit code."""

    def work(report: Report) -> int:
        kind = KeyType.parse(key_type)
        ca = account_ca(common, account, json_mode=report.json_mode, create=action == "create")
        state = ca.state
        if action == "deactivate" and not confirmed:
            if not (sys.stdin.isatty() and report.out.is_terminal) or report.json_mode:
                raise InvalidInput("deactivating an account cannot be undone: confirm with --yes")
            answer = input(f"Deactivate the account for {ca.directory} for good? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                raise InvalidInput("not confirmed; nothing was changed")

        async def main() -> tuple[str, dict[str, Any]]:
            if action == "create":
                had_key = await state.load_account_key() is not None
                async with open_client(ca, create=True, key_type=kind) as client:
                    known = client.account_url is not None
                    found = await _existing_or_register(client)
                    await state.save_ca_settings(ca.ca_bundle)  # `renew` finds the CA
                    if ca.contact and set(found.contact) != set(ca.contact):
                        found = await client.update_contact(ca.contact)
                    verb = "exists" if (had_key and known) else "registered"
                    return verb, _account_json(found, client.account_key, state)
            async with open_client(ca, create=False) as client:
                if action == "show":
                    found = await (
                        client.account() if client.account_url else client.find_account()
                    )
                    return "show", _account_json(found, client.account_key, state)
                if action == "rollover":
                    old = client.account_key.thumbprint
                    document = await _rollover(ca, client, kind)
                    document["previous_thumbprint"] = old
                    return "rolled over", document
                assert action == "deactivate"
                return "deactivated", await _deactivate(ca, client)

        verb, document = run_interruptible(main, json_mode=report.json_mode)
        if report.json_mode:
            report.json({"status": verb.replace(" ", "-"), **document})
            return ExitCode.OK
        titles = {
            "show": "Account",
            "registered": "Account registered",
            "exists": "Account exists",
            "rolled over": "Account key rolled over",
            "deactivated": "Account deactivated",
        }
        title = Text(f"{titles[verb]} at {ca.directory}", style="bold green")
        rows = [
            ("url", document["url"]),
            ("status", document["account_status"]),
            ("contact", ", ".join(document["contact"]) or "-"),
            ("key", f"{document['algorithm']} {document['thumbprint']}"),
        ]
        if "archived_key" in document:
            rows.append(("old key", document["archived_key"]))
        else:
            rows.append(("stored in", document["key"]))
        report.rows(title, rows)
        return ExitCode.OK

    return run_guarded(common, work)


def account_ca(
    common: CommonArgs, account: AccountArgs | None, *, json_mode: bool, create: bool = False
) -> CaPlan:
    """The CA an ``account`` command acts on, found as ``delete`` and ``revoke`` find theirs
    (:mod:`._findca`): ``--directory``'s (with its stored ``--ca-bundle``), else the only
    CA of the state directory with an account; several: :class:`InvalidInput` naming them.

    ``create``: a state directory with no CA is no error (``--directory``, else Let's
    Encrypt's), nor one CA without an account (the account is registered again there).
    """
    cas = state_cas(common, account, json_mode=json_mode, empty_ok=create)
    if cas.chosen:
        return cas.plans[0]
    if not cas.plans:
        return cas.default
    return run_interruptible(lambda: _account_ca(cas, create=create), json_mode=json_mode)


async def _account_ca(cas: StateCas, *, create: bool) -> CaPlan:
    """The only CA of ``cas`` with an account (``create``: or the only CA)."""
    found = [ca for ca in cas.plans if await ca.state.load_account_key() is not None]
    if len(found) > 1:
        raise ambiguous("an account", cas.root, found)
    if found:
        return found[0]
    if create and len(cas.plans) == 1:
        return cas.plans[0]
    if create:
        listed = ", ".join(plan.directory for plan in cas.plans)
        raise InvalidInput(
            f"{cas.root} holds several CAs and no account: {listed}; give --directory URL "
            "to choose one (nothing was sent)"
        )
    raise InvalidInput(
        f"no account in {cas.root}: create one with `acmecerts account create` "
        "(issuing a certificate creates one too)"
    )


async def _existing_or_register(client: AcmeClient) -> Account:
    """The stored account as the CA has it; else register (the terms are checked then)."""
    if client.account_url is not None:
        try:
            return await client.account()
        except AccountDoesNotExist:  # the CA forgot it (a test CA restarted)
            client.account_url = None
    return await client.register()


async def _rollover(ca: CaPlan, client: AcmeClient, kind: KeyType) -> dict[str, Any]:
    """Store the new key, switch at the CA, then replace the stored account key
    (:func:`~acmecerts.manager.roll_over_account_key`)."""
    state = ca.state
    missing = f"no account key in {state.root}"
    found = await roll_over_account_key(state.storage, state.layout, client, kind, missing=missing)
    return _account_json(found, client.account_key, state)


async def _deactivate(ca: CaPlan, client: AcmeClient) -> dict[str, Any]:
    state = ca.state
    found, key, archived = await deactivate_stored_account(
        state.storage, state.layout, client, missing=f"no account key in {state.root}"
    )
    document = _account_json(found, key, state)
    document["archived_key"] = state.path_for(archived)
    return document
