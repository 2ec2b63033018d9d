"""What the commands are given: the values of the options several commands share.

Each dataclass is what one group of options of :mod:`acmecerts.cli._options` turns into
(``--directory`` ... ``--config``: :class:`CommonArgs`; ``--email`` ... ``--agree-tos``:
:class:`AccountArgs`; the challenge options: :class:`ChallengeOptions`; ``--concurrency``
and ``--max-wait``: :class:`BatchArgs`; the hooks: :class:`HookArgs`). Standard library
only, like :mod:`acmecerts.cli._options`: the command definitions need these classes at
start-up, before anything of the library is imported (``tests/cli/test_cli_start.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Final

from acmecerts.errors import InvalidInput

__all__ = [
    "DEFAULT_HOOK_TIMEOUT",
    "AccountArgs",
    "BatchArgs",
    "ChallengeOptions",
    "CommonArgs",
    "HookArgs",
    "Hooks",
]

#: Seconds a hook may run before it is killed (``--hook-timeout``).
DEFAULT_HOOK_TIMEOUT: Final = 300.0


@dataclasses.dataclass(frozen=True, slots=True)
class CommonArgs:
    """Options every command has."""

    #: ``--directory`` as given (``None``: Let's Encrypt's, or its staging with ``staging``).
    directory: str | None = None
    ca_bundle: Path | None = None
    state_dir: Path | None = None
    rate_limits: str = "auto"
    timeout: float = 1800.0
    json: bool = False
    verbose: int = 0
    #: ``--proxy`` as given (``None``: the environment's; may hold credentials: no repr).
    proxy: str | None = dataclasses.field(default=None, repr=False)
    #: ``--staging``: Let's Encrypt's staging directory.
    staging: bool = False
    #: ``--log-format``: ``"text"`` or ``"json"`` (one JSON object per log line).
    log_format: str = "text"

    @property
    def only_directory(self) -> bool:
        """``--directory`` or ``--staging`` was given: one CA, not every CA of the state."""
        return self.directory is not None or self.staging


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class AccountArgs:
    """Options for creating an account."""

    emails: tuple[str, ...] = ()
    eab_kid: str | None = None
    eab_hmac_key: str | None = None
    #: ``--agree-tos``: agree to the CA's terms of service when an account is created.
    agree_tos: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ChallengeOptions:
    """The challenge options as typed."""

    challenge: str = "http-01"
    #: ``[::]:80``: every IPv4 and IPv6 address (a dual-stack socket).
    http_01_listen: str = "[::]:80"
    #: ``--webroot``: answer http-01 by writing into this document root instead.
    webroot: Path | None = None
    tls_alpn_01_listen: str = "[::]:443"
    dns_rfc2136_server: str | None = None
    dns_tsig_key: str | None = None
    dns_tsig_secret: str | None = dataclasses.field(default=None, repr=False)
    dns_tsig_algorithm: str = "hmac-sha256"
    dns_hook: str | None = None
    #: ``--dns-provider``: a dns-lexicon provider name (LexiconSolver).
    dns_provider: str | None = None
    #: ``--dns-provider-option KEY=VALUE``: its credentials; never stored.
    dns_provider_options: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    dns_propagation_nameservers: tuple[str, ...] = ()
    dns_propagation_timeout: float = 120.0


@dataclasses.dataclass(frozen=True, slots=True)
class BatchArgs:
    """``--concurrency`` and ``--max-wait`` of ``issue`` and ``renew``."""

    concurrency: int = 8
    max_wait: float = 120.0

    def check(self) -> None:
        """Raise :class:`InvalidInput` for a ``--concurrency`` below 1."""
        if self.concurrency < 1:
            raise InvalidInput(f"--concurrency must be at least 1, not {self.concurrency}")


@dataclasses.dataclass(frozen=True, slots=True)
class Hooks:
    """The three hook commands of a certificate (``None``: none)."""

    pre: str | None = None
    post: str | None = None
    deploy: str | None = None

    def overridden_by(self, given: Hooks) -> Hooks:
        """These hooks with each one ``given`` replacing its own (``""``: removed)."""

        def pick(mine: str | None, theirs: str | None) -> str | None:
            if theirs is None:
                return mine
            return theirs if theirs.strip() else None

        return Hooks(
            pre=pick(self.pre, given.pre),
            post=pick(self.post, given.post),
            deploy=pick(self.deploy, given.deploy),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class HookArgs:
    """``--pre-hook``, ``--post-hook``, ``--deploy-hook`` (``None``: keep the stored one;
    ``""``: remove it) and ``--hook-timeout``."""

    hooks: Hooks = dataclasses.field(default_factory=Hooks)
    timeout: float = DEFAULT_HOOK_TIMEOUT

    def checked_timeout(self) -> float:
        """``--hook-timeout``, validated (raises :class:`InvalidInput`)."""
        from acmecerts import duration_seconds  # the library's one duration parser

        return duration_seconds(self.timeout, "--hook-timeout", positive=True)
