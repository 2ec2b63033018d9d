"""How each certificate was asked for, kept beside the manager's store: :class:`CertificateRecord`.

A program that issues certificates from a shared store and renews them later with no
flags (the CLI: ``issue`` writes a record, ``renew``, ``status`` and ``delete`` read it)
keeps one record per certificate at ``<account>/cli/<cert>.json``: the identifiers asked
for, the export directory, key type, profile, preferred chain, revoked serial, webroot,
challenge settings (:class:`StoredChallenge`), hooks and a deletion in progress.
:func:`save_certificate_record`, :func:`load_certificate_record`,
:func:`list_certificate_records` and :func:`known_certificates` write and read them
(:func:`known_identifiers` and :func:`certificate_for`: which certificate a set of
identifiers is);
:func:`delete_recorded_certificate` removes a certificate and its record, so that an
interruption never leaves a certificate half there; :func:`import_certificate` stores one
obtained by another client with its record; :func:`mark_revoked` notes a revocation.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from acmecerts._time import duration_seconds
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.manager._reading import (
    StoredCertificate,
    delete_stored_certificate,
    list_stored_certificates,
    load_json_object,
    natural_key,
)
from acmecerts.protocol.certificate import CertificateChain, certificate_info
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.storage import KeyLayout, Storage, storage_label
from acmecerts.storage.export import remove_exported
from acmecerts.storage.keys import CertificateBundle, certificate_slug

__all__ = [
    "CertificateRecord",
    "Removal",
    "StoredChallenge",
    "certificate_for",
    "certificate_identifiers",
    "certificate_record_key",
    "delete_recorded_certificate",
    "import_certificate",
    "known_certificates",
    "known_identifiers",
    "list_certificate_records",
    "load_certificate_record",
    "mark_revoked",
    "save_certificate_record",
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
    """How a certificate was asked for (what renewing it needs besides what the manager
    stores): the CLI's record, written at ``issue`` and read by ``renew``."""

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


def certificate_record_key(layout: KeyLayout, name: str) -> str:
    """The storage key of certificate ``name``'s record: ``<account>/cli/<cert>.json``."""
    return f"{layout.account_prefix}cli/{certificate_slug(name)}.json"


async def load_certificate_record(
    storage: Storage, layout: KeyLayout, name: str
) -> CertificateRecord | None:
    """The record of certificate ``name`` (``None``: there is none).

    Raises:
        StorageError: the stored record is damaged (the message names its key).
    """
    key = certificate_record_key(layout, name)
    document = await load_json_object(storage, key)
    return None if document is None else CertificateRecord.from_json(document, key)


async def list_certificate_records(storage: Storage, layout: KeyLayout) -> list[CertificateRecord]:
    """Every certificate asked for (issued or not), in natural order of names.

    Raises:
        StorageError: a stored record is damaged (the message names its file).
    """
    records = []
    for key in await storage.list(f"{layout.account_prefix}cli/"):
        document = await load_json_object(storage, key)
        if document is not None:
            records.append(CertificateRecord.from_json(document, storage_label(storage, key)))
    return sorted(records, key=lambda r: natural_key(r.name))


async def save_certificate_record(
    storage: Storage, layout: KeyLayout, record: CertificateRecord
) -> None:
    """Store ``record`` (replacing the one of the same name)."""
    data = json.dumps(record.to_json(), indent=2, sort_keys=True).encode() + b"\n"
    await storage.store(certificate_record_key(layout, record.name), data)


async def known_certificates(
    storage: Storage, layout: KeyLayout
) -> list[tuple[str, StoredCertificate | None, CertificateRecord | None]]:
    """Every certificate stored or asked for: ``(name, stored, record)``, in natural order.

    A record without a stored certificate was asked for and not issued (yet). A
    certificate whose deletion was interrupted (:attr:`CertificateRecord.deleting`) is
    not listed: nothing should renew it.
    """
    all_records = await list_certificate_records(storage, layout)
    deleting = {r.name for r in all_records if r.deleting is not None}
    stored = {
        c.name: c for c in await list_stored_certificates(storage, layout) if c.name not in deleting
    }
    records = {r.name: r for r in all_records if r.identifiers and r.name not in deleting}
    return [
        (name, stored.get(name), records.get(name))
        for name in sorted(stored.keys() | records.keys(), key=natural_key)
    ]


def certificate_identifiers(
    stored: StoredCertificate | None, record: CertificateRecord | None
) -> tuple[str, ...]:
    """The identifiers a certificate stands for: what was last asked for (its record),
    else what the stored certificate holds."""
    if record is not None and record.identifiers:
        return record.identifiers
    return stored.identifiers if stored is not None else ()


async def known_identifiers(storage: Storage, layout: KeyLayout) -> dict[str, tuple[str, ...]]:
    """Every certificate stored or asked for (:func:`known_certificates`) and the
    identifiers it stands for (:func:`certificate_identifiers`), by name."""
    return {
        name: certificate_identifiers(stored, record)
        for name, stored, record in await known_certificates(storage, layout)
    }


def _as_set(values: Sequence[str]) -> frozenset[Identifier] | None:
    try:
        return frozenset(parse_identifiers(values)) if values else None
    except InvalidInput:
        return None  # a record written by hand: it matches nothing


def certificate_for(
    known: Mapping[str, Sequence[str]], identifiers: Iterable[Identifier], *, preferred: str
) -> str | None:
    """The certificate of ``known`` (:func:`known_identifiers`) that stands for exactly
    the set ``identifiers``, whatever their order (compared normalized: lowercase, IDNA
    A-labels, canonical IP addresses); the one named ``preferred`` when several do.
    ``None`` when none does."""
    wanted = frozenset(identifiers)
    same = [name for name, values in known.items() if _as_set(values) == wanted]
    if not same:
        return None
    return preferred if preferred in same else same[0]


@dataclasses.dataclass
class Removal:
    """What :func:`delete_recorded_certificate` removed from disk, and what it left alone."""

    #: Files removed from the default export directory.
    removed_files: list[Path] = dataclasses.field(default_factory=list)
    #: An export directory of the user's choosing, whose files were left where they are.
    kept_out: Path | None = None


async def delete_recorded_certificate(
    storage: Storage, layout: KeyLayout, name: str, *, default_out: Path
) -> Removal:
    """Delete certificate ``name`` and its record, leaving nothing half-deleted behind.

    The record is marked :attr:`~CertificateRecord.deleting` first (from then on
    :func:`known_certificates` skips it), then everything the manager stored for it goes
    (:func:`~acmecerts.manager.delete_stored_certificate`), then the files exported to
    ``default_out`` (only when the record says they were written there in the plain
    layout: any other directory is the user's and is left alone), and the record last.
    If anything fails or the process is killed in between, the mark stays, and calling
    this again finishes the job.

    Call it under the certificate's store lock (``layout.certificate_lock(name)``).

    Raises:
        StorageError: the store or a file cannot be changed (what was removed until then
            stays removed, and the mark stays).
    """
    record = await load_certificate_record(storage, layout, name)
    if record is None or record.deleting is None:
        started = _dt.datetime.now(_dt.UTC).isoformat()
        record = dataclasses.replace(record or CertificateRecord(name=name), deleting=started)
        await save_certificate_record(storage, layout, record)
    await delete_stored_certificate(storage, layout, name)
    removal = Removal()
    out = Path(record.out) if record.out else default_out
    if out == default_out and record.out_layout in (None, "plain"):
        removal.removed_files = remove_exported(default_out)
    else:
        removal.kept_out = out
    await storage.delete(certificate_record_key(layout, name))
    return removal


async def import_certificate(
    storage: Storage,
    layout: KeyLayout,
    record: CertificateRecord,
    chain: CertificateChain,
    private_key_pem: str,
) -> None:
    """Store a certificate obtained by another client (certbot), as the manager would
    have stored it, with its ``record``: the record first, then the certificate in one
    write that must find none of that name (an existing one is never replaced). If that
    write fails, the record is removed again: call it for a name that has neither.

    Raises:
        VersionConflict: a certificate named ``record.name`` is stored already.
        StorageError: the store cannot be written.
    """
    details = certificate_info(chain.leaf)
    bundle = CertificateBundle(
        name=record.name,
        identifiers=record.identifiers,
        fullchain_pem=chain.pem,
        private_key_pem=private_key_pem,
        order_url="",
        certificate_url="",
        serial=details.serial,
        not_after=details.not_after.isoformat(),
    )
    await save_certificate_record(storage, layout, record)
    key = layout.certificate(record.name).record
    try:
        await storage.store(key, bundle.to_bytes(), secret=True, expect_version=None)
    except BaseException:
        await storage.delete(certificate_record_key(layout, record.name))
        raise


async def mark_revoked(storage: Storage, layout: KeyLayout, serial: str) -> str | None:
    """Note in its record that the stored certificate with this serial was revoked (a
    later run renews it); return its name, ``None`` when no stored certificate has it."""
    for stored in await list_stored_certificates(storage, layout):
        if stored.info.serial == serial:
            name = stored.name
            record = await load_certificate_record(storage, layout, name)
            record = dataclasses.replace(
                record or CertificateRecord(name=name), revoked_serial=serial
            )
            await save_certificate_record(storage, layout, record)
            return name
    return None
