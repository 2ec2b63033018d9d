"""The steps of one certificate's issuance, one ``-v`` log line each.

For every certificate, in order: the ``account`` it orders with, its ``order``, each
``authorization`` still to be validated (with the challenge presented), the
``challenge`` answered, ``finalize``, ``download``. Each line starts with the
certificate's name, so the steps of a batch are told apart::

    www: account https://ca/acme/acct/1
    www: order https://ca/acme/order/7 (pending, 1 authorization)
    www: authorization https://ca/acme/authz/9 for www.example.org (http-01 presented)
    www: challenge http-01 answered https://ca/acme/chall/3 (the CA validates it now)
    www: finalize https://ca/acme/finalize/7 (every authorization valid)
    www: download https://ca/acme/cert/ab (order valid)
"""

from __future__ import annotations

import logging

from acmecerts.client import (
    CertificateDownloaded,
    ChallengeAnswered,
    ChallengePresented,
    ChallengeRetried,
    ClientEvent,
    OrderAuthorized,
    OrderCreated,
    OrderRequested,
    OrderResumed,
)

__all__ = ["log_step", "step_of"]

log = logging.getLogger("acmecerts.cli.steps")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def step_of(event: ClientEvent, account_url: str | None) -> str | None:
    """The step ``event`` stands for, in words (``None``: not a step of its own)."""
    if isinstance(event, OrderRequested):
        return f"account {account_url or '(registering)'}"
    if isinstance(event, OrderCreated | OrderResumed):
        order = event.order
        count = _plural(len(order.authorizations), "authorization")
        if isinstance(event, OrderResumed):  # no OrderRequested before it: say the account
            return f"account {account_url}; order {order.url} (resumed, {order.status}, {count})"
        how = "found again, " if event.found else ""
        return f"order {order.url} ({how}{order.status}, {count})"
    if isinstance(event, ChallengePresented):
        task = event.task
        identifier = task.identifier.value
        return f"authorization {event.authorization_url} for {identifier} ({task.type} presented)"
    if isinstance(event, ChallengeAnswered):
        challenge = event.challenge
        return (
            f"challenge {challenge.type} answered {challenge.url} "
            f"({challenge.status}; the CA validates it now)"
        )
    if isinstance(event, ChallengeRetried):
        challenge = event.challenge
        return f"challenge {challenge.type} answered again {challenge.url} (try {event.attempt})"
    if isinstance(event, OrderAuthorized):
        return f"finalize {event.order.finalize} (every authorization valid)"
    if isinstance(event, CertificateDownloaded):
        order = event.order
        return f"download {order.certificate or order.url} (order {order.status})"
    return None


def log_step(name: str, event: ClientEvent, account_url: str | None) -> None:
    """Log ``event`` as a step of certificate ``name`` (info: shown under ``-v``)."""
    step = step_of(event, account_url)
    if step is not None:
        log.info("%s: %s", name, step)
