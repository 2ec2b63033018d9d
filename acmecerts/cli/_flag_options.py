"""The options certbot and lego users reach for (declared as in :mod:`._options`):
``renew --cert-name``, ``issue --reuse-key``, ``--csr`` and ``--dry-run``."""

from __future__ import annotations

from typing import Annotated

from ._options import Panel, opt

__all__ = ["RenewCertName", "ReuseKey"]

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
