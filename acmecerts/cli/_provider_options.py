"""The options of ``--dns-provider`` (declared as in :mod:`._options`)."""

from __future__ import annotations

from typing import Annotated

from ._options import Panel, opt

DnsProvider = Annotated[
    str | None,
    opt(
        "dns-provider",
        panel=Panel.CHALLENGE,
        metavar="NAME",
        help="dns-01: write the TXT value through this DNS provider's API with dns-lexicon "
        "(cloudflare, route53, googleclouddns, azure, powerdns...; needs acmecerts[dns]); "
        "credentials from LEXICON_<PROVIDER>_<OPTION> or --dns-provider-option.",
        show_default=False,
    ),
]
DnsProviderOption = Annotated[
    list[str] | None,
    opt(
        "dns-provider-option",
        panel=Panel.CHALLENGE,
        metavar="KEY=VALUE",
        help="dns-01: a --dns-provider credential under lexicon's name, e.g. "
        "auth_token=... (repeatable; never stored).",
        show_default=False,
    ),
]
