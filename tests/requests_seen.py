"""Watching a client's requests in tests: the events seam, as the deprecated hook did.

``client.subscribe(on_requests(hook))`` calls ``hook(method, url)`` for every request
sent, what ``AcmeClient(on_request=hook)`` did before it was deprecated (the tests run
with warnings as errors, so they use the events).
"""

from __future__ import annotations

from collections.abc import Callable

from acmecerts.transport import RequestSent


def on_requests(hook: Callable[[str, str], object]) -> Callable[[object], None]:
    """A subscriber that calls ``hook(method, url)`` for every :class:`RequestSent`."""

    def subscriber(event: object) -> None:
        if isinstance(event, RequestSent):
            hook(event.method, event.url)

    return subscriber
