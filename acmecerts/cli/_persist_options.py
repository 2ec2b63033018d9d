"""The options of ``account dns-persist-records`` (declared as in :mod:`._options`)."""

from __future__ import annotations

from typing import Annotated

import typer

from ._options import opt

PersistNames = Annotated[
    list[str],
    typer.Argument(
        metavar="NAME...",
        help="The DNS names to validate with dns-persist-01 (*.NAME: a record with "
        "policy=wildcard at NAME).",
        show_default=False,
    ),
]
PersistWildcard = Annotated[
    bool,
    opt(
        "wildcard",
        help="Add policy=wildcard to every record: it then also covers *.NAME and every "
        "subdomain of NAME.",
    ),
]
PersistUntil = Annotated[
    str | None,
    opt(
        "persist-until",
        metavar="DATE",
        help="Add persistUntil: the CA stops using the record after DATE (ISO 8601, e.g. "
        "2028-01-01 or 2028-01-01T00:00:00+00:00; UTC when no offset is given).",
        show_default=False,
    ),
]
PersistIssuer = Annotated[
    str | None,
    opt(
        "issuer",
        metavar="DOMAIN",
        help="The CA's issuer domain name to put in the records [default: the first of "
        "the CA's caaIdentities].",
        show_default=False,
    ),
]
