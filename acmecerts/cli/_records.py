"""What the CLI keeps in its state directory besides the library's files: the records.

* :class:`CertificateRecord` (``<ca>/accounts/default/cli/<cert>.json``): the CLI's own
  record of a certificate: export directory, key type, profile, preferred chain, revoked
  serial, webroot, challenge settings (:class:`StoredChallenge`), hooks, deletion in
  progress;
* the CA directories of a state directory (:func:`find_ca_dirs`), each with its
  settings (:class:`~acmecerts.manager.CaSettings`).

The layout of the whole directory is in :mod:`acmecerts.cli._state`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acmecerts import duration_seconds
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.manager import CA_SETTINGS_FILE

__all__ = [
    "CertificateRecord",
    "StoredChallenge",
    "find_ca_dirs",
]

_RECORD_FORMAT = 1


# -- what the store holds ---------------------------------------------------------------------


def _known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a stored document that are fields of ``cls`` (others are ignored:
    written by a later acmecerts)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _texts(values: Mapping[str, object], *, required: str) -> bool:
    """Every value is a string or ``None``, and ``values[required]`` a string."""
    return isinstance(values.get(required), str) and all(
        v is None or isinstance(v, str) for v in values.values()
    )


def _string_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


@dataclasses.dataclass(frozen=True, slots=True)
class StoredChallenge:
    """How a certificate's challenges were answered at ``issue``: ``renew`` answers them
    the same way (as certbot keeps them in its renewal configuration).

    Only what the challenge type uses is set. Never a secret: the TSIG secret of
    ``--dns-rfc2136-server`` is given to every run (``--dns-tsig-secret``,
    ``ACMECERTS_DNS_TSIG_SECRET`` or the configuration file). ``--webroot`` is kept in
    :attr:`CertificateRecord.webroot`, as before these settings were stored.
    """

    #: ``http-01``, ``dns-01`` or ``tls-alpn-01``.
    challenge: str
    #: ``--http-01-listen`` as given (``None`` with ``--webroot``, and for other types).
    http_01_listen: str | None = None
    tls_alpn_01_listen: str | None = None
    dns_rfc2136_server: str | None = None
    dns_tsig_key: str | None = None
    dns_tsig_algorithm: str | None = None
    dns_hook: str | None = None
    #: ``--dns-provider`` (the name only: its credentials are given to every run).
    dns_provider: str | None = None
    dns_propagation_nameservers: tuple[str, ...] = ()
    dns_propagation_timeout: float | None = None

    def to_json(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        document["dns_propagation_nameservers"] = list(self.dns_propagation_nameservers)
        return document

    @classmethod
    def from_json(cls, data: object, where: str) -> StoredChallenge:
        def bad() -> StorageError:
            return StorageError(
                f"{where}: the stored challenge settings are not valid; fix or remove them",
                path=where,
            )

        if not isinstance(data, dict):
            raise bad()
        values = _known_fields(cls, data)
        servers = values.pop("dns_propagation_nameservers", [])
        timeout = values.pop("dns_propagation_timeout", None)
        if not _texts(values, required="challenge") or not _string_list(servers):
            raise bad()
        if timeout is not None:
            try:  # the library's one duration parser (JSON has no timedelta: seconds)
                timeout = duration_seconds(timeout, "dns_propagation_timeout")
            except InvalidInput:  # NaN, Infinity (Python's json reads both), -1, "120"...
                raise bad() from None
        return cls(
            dns_propagation_nameservers=tuple(servers),
            dns_propagation_timeout=timeout,
            **values,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateRecord:
    """What the CLI remembers about a certificate besides what the manager stores."""

    name: str
    #: The identifiers asked for (saved before the first order: a certificate that was
    #: deferred or failed is still known, and ``renew`` issues it).
    identifiers: tuple[str, ...] = ()
    #: Where the plain PEM files are written (``--out``).
    out: str | None = None
    #: ``--out-layout``: ``certbot`` (``out`` is the root of ``live/`` and ``archive/``);
    #: ``None`` is ``plain``.
    out_layout: str | None = None
    key_type: str | None = None
    profile: str | None = None
    preferred_chain: str | None = None
    #: ``False``: ``profile`` came from ``--preferred-profile`` (renewals prefer it too).
    profile_required: bool = True
    #: The serial of a stored certificate that was revoked (renewed at the next run).
    revoked_serial: str | None = None
    #: The document root http-01 responses are written into (``--webroot``).
    webroot: str | None = None
    #: When ``acmecerts delete`` started removing the certificate (ISO 8601): set before
    #: anything is removed and removed last, so a deletion that was interrupted is seen
    #: (``status`` shows it, ``renew`` skips it) and finished by the next ``delete``.
    deleting: str | None = None
    #: Shell commands run around orders and after each new certificate (``--pre-hook``,
    #: ``--post-hook``, ``--deploy-hook``); ``renew`` runs them without flags.
    pre_hook: str | None = None
    post_hook: str | None = None
    deploy_hook: str | None = None
    #: How its challenges were answered at ``issue`` (``None``: written by an acmecerts
    #: that did not store them; ``renew`` then uses its own challenge options).
    challenge: StoredChallenge | None = None
    #: ``--reuse-key``: renewals keep the certificate's private key.
    reuse_key: bool = False

    def to_json(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        document["identifiers"] = list(self.identifiers)
        document["challenge"] = self.challenge.to_json() if self.challenge is not None else None
        return {"format": _RECORD_FORMAT, **document}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> CertificateRecord:
        values = _known_fields(cls, data)
        identifiers = values.pop("identifiers", [])
        challenge_json = values.pop("challenge", None)
        profile_required = values.pop("profile_required", True)
        reuse_key = values.pop("reuse_key", False)
        challenge = (
            None if challenge_json is None else StoredChallenge.from_json(challenge_json, where)
        )
        if (
            not _texts(values, required="name")
            or not _string_list(identifiers)
            or not isinstance(profile_required, bool)
            or not isinstance(reuse_key, bool)
        ):
            raise StorageError(f"{where} is not a valid CLI record; fix or remove it", path=where)
        return cls(
            identifiers=tuple(identifiers),
            challenge=challenge,
            profile_required=profile_required,
            reuse_key=reuse_key,
            **values,
        )


def find_ca_dirs(root: Path) -> list[str]:
    """The CA directories (segments) in the state directory ``root``, sorted.

    A CA directory is one with an ``accounts`` directory or a ``cli-settings.json``;
    ``certificates`` (the default ``--out``) and ``accounts`` (the first cut's layout)
    are not. Raises :class:`OSError` when ``root`` cannot be read.
    """
    found: list[str] = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(".") or entry.name in ("certificates", "accounts"):
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            path = Path(entry.path)
            if (path / "accounts").is_dir() or (path / CA_SETTINGS_FILE).is_file():
                found.append(entry.name)
    return sorted(found)
