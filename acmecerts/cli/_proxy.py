"""``--proxy``: the HTTP proxy the CLI reaches the CA through, checked before anything is sent.

Without ``--proxy`` (or ``ACMECERTS_PROXY``) the environment decides, as for curl:
``HTTPS_PROXY``/``https_proxy`` (or ``ALL_PROXY``), with ``NO_PROXY`` exceptions. ``--proxy
URL`` sends requests through that proxy instead, still honouring ``NO_PROXY`` (as curl's
``--proxy`` does); ``--proxy none`` connects directly whatever the environment says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from acmecerts.errors import InvalidInput
from acmecerts.transport import ProxyConfig

__all__ = ["cli_proxy"]

#: ``--proxy`` values that mean "no proxy at all".
_DIRECT = frozenset({"none", "direct", "off"})


def cli_proxy(value: str | None, environ: Mapping[str, str] | None = None) -> ProxyConfig | None:
    """The proxies ``--proxy value`` asks for (``None``: connect directly).

    Raises:
        InvalidInput: ``--proxy`` or a proxy environment variable is not an ``http://``
            proxy URL (the message never shows credentials).
    """
    env = os.environ if environ is None else environ
    text = (value or "").strip()
    if text.lower() in _DIRECT:
        return None
    if not text:
        config = ProxyConfig.from_env(env)
    else:
        # only NO_PROXY from the environment (read leniently, as curl reads it)
        exceptions = ProxyConfig.from_env(
            {name: env[name] for name in ("no_proxy", "NO_PROXY") if name in env}
        ).no_proxy
        try:
            config = ProxyConfig(text, no_proxy=exceptions)
        except InvalidInput as exc:
            raise InvalidInput(f"--proxy: {str(exc).removeprefix('proxy: ')}") from None
    return config if config else None
