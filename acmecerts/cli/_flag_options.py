"""The options certbot and lego users reach for (declared as in :mod:`._options`):
``renew --cert-name``, ``issue --reuse-key``, ``--csr`` and ``--dry-run``."""

from __future__ import annotations

from typing import Annotated

from ._options import Panel, opt

__all__ = ["RenewCertName"]

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
