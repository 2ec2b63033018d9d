"""The options of ``import certbot`` and ``--out-layout`` (declared as in :mod:`._options`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._options import Panel, opt

OutLayout = Annotated[
    str,
    opt(
        "out-layout",
        panel=Panel.ISSUING,
        metavar="plain|certbot",
        help="plain: --out DIR holds cert.pem, chain.pem, fullchain.pem, privkey.pem; "
        "certbot: --out DIR is a root like /etc/letsencrypt, with DIR/live/NAME/*.pem "
        "symlinks into DIR/archive/NAME/ [default --out: STATE_DIR/certbot]. Either way the "
        "four files are switched to a new set by one rename.",
    ),
]
CertbotDir = Annotated[
    Path,
    typer.Argument(
        metavar="[DIR]",
        help="certbot's configuration directory (renewal/, live/, archive/, accounts/).",
    ),
]
ImportAccount = Annotated[
    bool,
    opt(
        "account",
        panel=Panel.ACCOUNT,
        help="Also import certbot's ACME account (its key and URL), so renewals are "
        "ordered by the same account and can name the certificate they replace (ARI).",
    ),
]
ImportOut = Annotated[
    Path | None,
    opt(
        "out",
        panel=Panel.ISSUING,
        metavar="DIR",
        help="Where renewals write the files: with --out-layout plain, DIR/NAME for each "
        "certificate [default: STATE_DIR/certificates/NAME]; with certbot, the root of "
        "live/ and archive/ [default: STATE_DIR/certbot].",
        show_default=False,
    ),
]
