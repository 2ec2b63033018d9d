"""The :class:`Solver` plug-in contract and what a solver is asked to do.

It sits in the protocol layer: the client drives solvers through it without importing
the solvers package (``acmecerts.solvers`` re-exports it).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from acmecerts.protocol.identifiers import Identifier

__all__ = ["ChallengeTask", "Solver"]


@dataclasses.dataclass(frozen=True, slots=True)
class ChallengeTask:
    """One challenge a solver must make the CA see.

    ``key_authorization`` is ``token || '.' || base64url(JWK thumbprint)`` (RFC 8555 §8.1);
    ``dns_txt_value`` is what dns-01 and dns-account-01 put in the TXT record (§8.4).
    dns-persist-01 has no token (``token`` and ``key_authorization`` are ``""``): its
    record is made of ``issuer_domain_names`` and ``account_url``.
    """

    #: Challenge type, e.g. ``"http-01"``.
    type: str
    #: The identifier being validated (for wildcards, the ``*.`` name).
    identifier: Identifier
    #: The challenge token from the CA (base64url, safe for paths once validated).
    token: str
    #: The key authorization string.
    key_authorization: str
    #: The challenge URL at the CA.
    url: str
    #: The account URL (dns-account-01 derives its record name from it; dns-persist-01
    #: puts it in the record as ``accounturi``). ``None`` when the driver does not say.
    account_url: str | None = None
    #: dns-persist-01: the CA's issuer domain names (checked: 1 to 10 domain names).
    issuer_domain_names: tuple[str, ...] = ()

    @property
    def dns_txt_value(self) -> str:
        """The TXT record value for dns-01: base64url(SHA-256(key authorization))."""
        from acmecerts.protocol.challenges import dns01_txt_value

        return dns01_txt_value(self.key_authorization)

    @property
    def dns_record_name(self) -> str:
        """The TXT record name the CA reads for this task (no trailing dot).

        dns-01: ``_acme-challenge.<name>``; dns-account-01:
        ``_<account label>._acme-challenge.<name>``; dns-persist-01:
        ``_validation-persist.<name>`` (a wildcard's ``*.`` dropped in each).
        """
        from acmecerts.protocol import challenges

        base = self.identifier.base_name
        if self.type == challenges.DNS_ACCOUNT_01:
            if self.account_url is None:
                from acmecerts.errors import UnsupportedChallenge

                raise UnsupportedChallenge("a dns-account-01 task needs the account URL")
            return challenges.dns_account01_record_name(base, self.account_url)
        if self.type == challenges.DNS_PERSIST_01:
            return challenges.dns_persist01_record_name(base)
        return f"_acme-challenge.{base}"

    def __repr__(self) -> str:
        return f"ChallengeTask(type={self.type!r}, identifier={self.identifier.value!r})"


@runtime_checkable
class Solver(Protocol):
    """Makes the CA able to validate a challenge of one type.

    Contract:

    * ``challenge_type`` names the one challenge type this solver answers.
    * ``present(task)`` MUST return once the CA can validate (for dns-01 after the record
      is published; an optional ``wait`` step is done inside ``present`` or by the caller's
      propagation check). It MUST honour cancellation.
    * ``cleanup(task)`` MUST NOT assume ``present`` succeeded (it is called in ``finally``
      blocks, after cancellation too), MUST be idempotent, and SHOULD be fast.
    * One solver instance MUST be safe to use for many concurrent tasks.
    """

    challenge_type: str

    def supports(self, identifier: Identifier) -> bool:
        """Whether this solver can answer for ``identifier`` (http-01: no wildcards)."""
        ...

    async def present(self, task: ChallengeTask) -> None:
        """Make the challenge response available to the CA."""
        ...

    async def cleanup(self, task: ChallengeTask) -> None:
        """Remove what ``present`` made available (idempotent; tolerate partial present)."""
        ...
