"""The options certbot and lego users reach for (declared as in :mod:`._options`):
``renew --cert-name``, ``issue --reuse-key``, ``--csr`` and ``--dry-run``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from ._options import Panel, opt

__all__ = ["Csr", "DryRun", "RenewCertName", "RenewDryRun", "ReuseKey"]

RenewCertName = Annotated[
    list[str] | None,
    opt(
        "cert-name",
        panel=Panel.ISSUING,
        metavar="NAME",
        help="Renew only this certificate, as `acmecerts status` names it (repeatable; "
        "the same as giving NAME as an argument).",
        show_default=False,
    ),
]
ReuseKey = Annotated[
    bool,
    opt(
        "reuse-key",
        panel=Panel.ISSUING,
        help="Renewals keep the certificate's private key (stored with the certificate "
        "for `renew`, like certbot's reuse_key) [default: a new key for every certificate].",
    ),
]
Csr = Annotated[
    Path | None,
    opt(
        "csr",
        panel=Panel.ISSUING,
        metavar="FILE",
        help="Your own certificate signing request (PEM or DER): the names are its "
        "subjectAltNames (NAME... may repeat them), the key stays with you: --out gets "
        "cert.pem, chain.pem and fullchain.pem, no privkey.pem. The certificate is not "
        "stored, so `renew` does not manage it.",
        show_default=False,
    ),
]
DryRun = Annotated[
    bool,
    opt(
        "dry-run",
        panel=Panel.ISSUING,
        help="Go through the whole issuance, at the CA's staging directory where it has "
        "one (Let's Encrypt's production: its staging), elsewhere at the same CA; nothing "
        "is saved or exported (state directory and --out untouched), no deploy-hook runs.",
    ),
]
RenewDryRun = Annotated[
    bool,
    opt(
        "dry-run",
        panel=Panel.ISSUING,
        help="Renew the certificates that are due (those named, or all with --force) "
        "at each CA's staging directory where it has one (Let's Encrypt's production: its "
        "staging), elsewhere at the same CA, without replaces; nothing is saved, exported "
        "or journaled (state directory and files untouched), no deploy-hook runs.",
    ),
]
