"""``acmecerts account dns-persist-records NAME...``: the records to publish once."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from rich.text import Text

from acmecerts.errors import InvalidInput
from acmecerts.protocol.challenges import dns_persist01_record_name, dns_persist01_txt_value
from acmecerts.protocol.identifiers import parse_identifier

from ._account import account_ca
from ._args import CommonArgs
from ._ca import open_client
from ._constants import ExitCode
from ._interrupt import run_interruptible
from ._report import Report, iso, run_guarded

__all__ = ["parse_persist_until", "run_dns_persist_records"]


def parse_persist_until(text: str) -> _dt.datetime:
    """``--persist-until``: an ISO 8601 date or date and time (UTC without an offset)."""
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"--persist-until {text!r}: expected an ISO 8601 date, e.g. 2028-01-01"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=_dt.UTC)


def run_dns_persist_records(
    names: list[str],
    *,
    common: CommonArgs,
    wildcard: bool = False,
    persist_until: str | None = None,
    issuer: str | None = None,
) -> int:
    """Print the ``_validation-persist`` records for ``names``; return the exit code."""

    def work(report: Report) -> int:
        identifiers = [parse_identifier(name) for name in names]
        for ident in identifiers:
            if ident.type != "dns":
                raise InvalidInput(f"{ident.value}: dns-persist-01 validates DNS names only")
        until = parse_persist_until(persist_until) if persist_until is not None else None
        ca = account_ca(common, None, json_mode=report.json_mode)  # as `account show`

        async def main() -> tuple[str, str, list[dict[str, Any]]]:
            async with open_client(ca, create=False) as client:
                found = await (client.account() if client.account_url else client.find_account())
                directory = await client.directory()
            chosen = issuer or (directory.caa_identities[0] if directory.caa_identities else None)
            if chosen is None:
                raise InvalidInput(
                    f"{ca.directory} names no caaIdentities: give the CA's issuer domain "
                    "name with --issuer"
                )
            records: dict[str, dict[str, Any]] = {}
            for ident in identifiers:
                name = dns_persist01_record_name(ident.value)
                wild = wildcard or ident.is_wildcard
                value = dns_persist01_txt_value(
                    chosen, found.url, wildcard=wild, persist_until=until
                )
                # *.NAME and NAME share one record; the wildcard one covers both
                if name not in records or wild:
                    records[name] = {"name": name, "value": value, "wildcard": wild}
            return found.url, chosen, list(records.values())

        account_url, chosen, records = run_interruptible(main, json_mode=report.json_mode)
        if report.json_mode:
            report.json(
                {
                    "status": "ok",
                    "account": account_url,
                    "issuer": chosen,
                    "persist_until": iso(until),
                    "records": records,
                }
            )
            return ExitCode.OK
        report.out.print(
            Text(f"; dns-persist-01 records for {account_url} at {chosen}", style="bold"),
            markup=False,
            highlight=False,
        )
        for record in records:
            report.out.print(
                f"{record['name']}. IN TXT {_txt(record['value'])}", markup=False, highlight=False
            )
        return ExitCode.OK

    return run_guarded(common, work)


def _txt(value: str) -> str:
    """A TXT value in zone-file syntax: strings of at most 255 octets (RFC 1035 §3.3)."""
    parts = [value[i : i + 255] for i in range(0, len(value), 255)] or [""]
    return " ".join('"' + part.replace("\\", "\\\\").replace('"', '\\"') + '"' for part in parts)
