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

Deleting a lineage (``acmecerts delete``) leaves no half-deleted state behind
(:func:`acmecerts.manager.delete_recorded_certificate`): while the mark is there,
``status`` shows the certificate as ``deleting``, ``renew`` never orders it, ``issue``
refuses its name, and ``delete`` again finishes the job.
"""

from __future__ import annotations

from collections.abc import Mapping

from acmecerts.errors import InvalidInput
from acmecerts.manager import certificate_for
from acmecerts.protocol.identifiers import Identifier, parse_identifiers
from acmecerts.storage.keys import certificate_slug

from ._state import State, certificate_name

__all__ = [
    "choose_lineage",
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


async def _refuse_half_deleted(state: State, name: str, where: str) -> None:
    record = await state.load_record(name)
    if record is not None and record.deleting is not None:
        raise InvalidInput(
            f"{where}certificate {name} is half-deleted (an `acmecerts delete` was "
            f"interrupted): run `acmecerts delete {name} --yes` to finish, then issue again"
        )


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

    See the module docstring for the rule. ``known`` is
    :func:`~acmecerts.manager.known_identifiers` (read once for a whole ``--from-file``).
    ``where`` prefixes an error (``"names.txt:3: "``); ``from_file`` words it for a line of
    ``--from-file``. Raises :class:`InvalidInput` when the name the first identifier gives
    already holds another set of identifiers.
    """
    if cert_name is not None:
        await _refuse_half_deleted(state, cert_name, where)
        return cert_name, identifiers
    default = certificate_name(identifiers[0].value)
    name = certificate_for(known, identifiers, preferred=default)
    if name is not None:
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
