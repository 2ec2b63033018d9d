"""Certificate lineages: which stored certificate a set of names is, and removing one.

A *lineage* is one certificate in the state directory, renewed again and again under
one name. Its identity is its **set** of identifiers (normalized: lowercase, IDNA
A-labels, canonical IP addresses), not their order:

* ``acmecerts issue NAME...`` without ``--cert-name`` uses the lineage that holds exactly
  that set, whatever order the names come in (the one named after the first name when
  several do). When none does, the certificate is named after its first name; if that
  name already holds *another* set, nothing is sent and the command says how to choose:
  ``--cert-name NAME`` to give that lineage the new names (replace, expand or shrink),
  another ``--cert-name`` to keep both.
* ``--cert-name NAME`` names the lineage explicitly: an existing one takes the given
  names (its next certificate is ordered for them), an unknown one is created.

Deleting a lineage (``acmecerts delete``) leaves no half-deleted state behind. Under the
certificate's store lock: the CLI record is marked ``deleting`` first (from then on
``renew`` and ``status``' list skip it), then the certificate's record (and, for a
store of the previous layout, ``meta.json``: the certificate no longer loads), the
certificate and its key, the order in flight and the attempt state, then
the files of the default export directory, and the record last. If anything fails or the
process is killed in between, the mark stays: ``status`` shows the certificate as
``deleting``, ``renew`` never orders it, ``issue`` refuses its name, and ``delete`` again
finishes the job.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path

from acmecerts.errors import InvalidInput
from acmecerts.manager import CertificateRecord, StoredCertificate, delete_stored_certificate
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.storage.export import remove_exported
from acmecerts.storage.keys import certificate_slug

from ._state import State, certificate_name

__all__ = [
    "Removal",
    "choose_lineage",
    "known_lineages",
    "lineage_identifiers",
    "remove_lineage",
    "validate_cert_name",
]


def validate_cert_name(value: str) -> str:
    """A ``--cert-name``: lowercase, ``[a-z0-9._-*]`` (the store's certificate names)."""
    name = value.strip().lower()
    try:
        certificate_slug(name)
    except InvalidInput as exc:
        raise InvalidInput(f"--cert-name {value!r}: {exc}") from None
    return name


def lineage_identifiers(
    stored: StoredCertificate | None, record: CertificateRecord | None
) -> tuple[str, ...]:
    """The names a lineage stands for: what was last asked for, else what it holds."""
    if record is not None and record.identifiers:
        return record.identifiers
    return stored.identifiers if stored is not None else ()


def _as_set(values: Sequence[str]) -> frozenset[Identifier] | None:
    try:
        return frozenset(parse_identifiers(values)) if values else None
    except InvalidInput:
        return None  # a record written by hand: it matches nothing


async def _refuse_half_deleted(state: State, name: str, where: str) -> None:
    record = await state.load_record(name)
    if record is not None and record.deleting is not None:
        raise InvalidInput(
            f"{where}certificate {name} is half-deleted (an `acmecerts delete` was "
            f"interrupted): run `acmecerts delete {name} --yes` to finish, then issue again"
        )


async def known_lineages(state: State) -> dict[str, tuple[str, ...]]:
    """Every certificate of the state directory and the names it stands for (read once)."""
    return {
        name: lineage_identifiers(stored, record)
        for name, stored, record in await state.known_certificates()
    }


async def choose_lineage(
    state: State,
    identifiers: tuple[Identifier, ...],
    *,
    known: Mapping[str, tuple[str, ...]],
    cert_name: str | None = None,
    where: str = "",
    from_file: bool = False,
) -> tuple[str, tuple[Identifier, ...]]:
    """The lineage ``identifiers`` belong to, and the identifiers in the order to order them.

    See the module docstring for the rule. ``known`` is :func:`known_lineages` (read once
    for a whole ``--from-file``). ``where`` prefixes an error
    (``"names.txt:3: "``); ``from_file`` words it for a line of ``--from-file``. Raises
    :class:`InvalidInput` when the name the first identifier gives already holds another
    set of identifiers.
    """
    wanted = frozenset(identifiers)
    if cert_name is not None:
        await _refuse_half_deleted(state, cert_name, where)
        return cert_name, identifiers
    default = certificate_name(identifiers[0].value)
    same = [name for name, values in known.items() if _as_set(values) == wanted]
    if same:
        name = default if default in same else same[0]
        # keep the lineage's own order: its renewals ask for exactly what it holds
        return name, parse_identifiers(known[name])
    if default in known:
        held = ", ".join(known[default])
        if from_file:
            asked = " ".join(i.value for i in identifiers)
            raise InvalidInput(
                f"{where}certificate {default} already exists for {held}: to change its "
                f"names, run `acmecerts issue --cert-name {default} {asked}` once (or "
                f"`acmecerts delete {default}`), then this file again"
            )
        raise InvalidInput(
            f"{where}certificate {default} already exists for {held}: give "
            f"--cert-name {default} to order it for these names instead, or another "
            "--cert-name to keep both certificates"
        )
    await _refuse_half_deleted(state, default, where)
    return default, identifiers


# -- acmecerts delete ----------------------------------------------------------------------


@dataclasses.dataclass
class Removal:
    """What deleting one lineage removed from disk, and what it left alone."""

    #: Files removed from the default export directory (``STATE/certificates/NAME``).
    removed_files: list[Path] = dataclasses.field(default_factory=list)
    #: A custom ``--out`` directory whose files were left where they are.
    kept_out: Path | None = None


async def remove_lineage(state: State, name: str) -> Removal:
    """Delete certificate ``name`` from the state directory (see the module docstring).

    Call it under the certificate's store lock. Raises :class:`StorageError` when the
    store or a file cannot be changed; what was removed until then stays removed and the
    ``deleting`` mark stays, so calling it again finishes the job.
    """
    record = await state.load_record(name)
    if record is None or record.deleting is None:
        started = _dt.datetime.now(_dt.UTC).isoformat()
        base = record or CertificateRecord(name=name)
        record = dataclasses.replace(base, deleting=started)
        await state.save_record(record)
    await delete_stored_certificate(state.storage, state.layout, name)
    default = state.default_out(name)
    removal = Removal()
    out = Path(record.out) if record.out else default
    if out == default and record.out_layout in (None, "plain"):
        removal.removed_files = remove_exported(default)
    else:
        removal.kept_out = out
    await state.storage.delete(state.record_key(name))
    return removal
