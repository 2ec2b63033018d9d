"""NonceSupply: where a request's nonce comes from, and the count of nonces on their way.

Pure bookkeeping plus anyio events: driven here by anyio tasks, no network. The
transport's use of it (bursts, stalls, the throttle, badNonce) is in test_transport.py
and test_transport_throttle.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import anyio
import anyio.lowlevel
import httpx
import pytest

from acmecerts import FakeClock, InvalidInput, RequestRetry
from acmecerts.errors import ConnectError, RequestTimeout, ServerBusy
from acmecerts.protocol.keys import AccountKey
from acmecerts.transport import AcmeTransport, NoncePool
from acmecerts.transport._http import _unsent
from acmecerts.transport._nonces import NonceSupply

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def until(condition: Callable[[], bool]) -> None:
    """Let the other tasks run until ``condition()`` holds (bounded by the test timeout)."""
    while not condition():
        await anyio.lowlevel.checkpoint()


class Fetcher:
    """A newNonce stand-in: counts its calls, answers ``fetched-N``, may be held.

    ``errors``: what the next calls raise instead, in order.
    """

    def __init__(self, supply: NonceSupply) -> None:
        self.supply = supply
        self.calls = 0
        self.promised_during: list[int] = []
        self.release: anyio.Event | None = None
        self.errors: list[Exception] = []

    async def __call__(self) -> str:
        self.calls += 1
        self.promised_during.append(self.supply.promised)
        error = self.errors.pop(0) if self.errors else None
        if self.release is not None:
            await self.release.wait()
        if error is not None:
            raise error
        return f"fetched-{self.calls:02d}"


def supply(bound: int = 32, wait: float = 5.0) -> tuple[NonceSupply, Fetcher]:
    made = NonceSupply(NoncePool(), bound=bound, wait=wait)
    return made, Fetcher(made)


async def test_the_pool_comes_first_newest_nonce_first() -> None:
    nonces, fetch = supply()
    nonces.pool.put("pooled-aaaa")
    nonces.pool.put("pooled-bbbb")
    assert await nonces.take(fetch) == "pooled-bbbb"
    assert await nonces.take(fetch) == "pooled-aaaa"
    assert fetch.calls == 0
    assert nonces.promised == 0


async def test_with_nothing_on_its_way_a_request_fetches_and_keeps_the_nonce() -> None:
    nonces, fetch = supply()
    assert await nonces.take(fetch) == "fetched-01"
    assert fetch.promised_during == [1]  # the newNonce in flight is a nonce on its way
    assert nonces.promised == 0
    assert len(nonces.pool) == 0  # the requester's own: it never enters the pool


async def test_answers_are_handed_to_the_waiting_requests_longest_waiting_first() -> None:
    nonces, fetch = supply()
    got: dict[str, str] = {}

    async def request(name: str) -> None:
        got[name] = await nonces.take(fetch)

    for _ in range(3):
        nonces.expect()  # three POSTs in flight
    async with anyio.create_task_group() as tg:
        for waiting, name in enumerate(("a", "b", "c"), start=1):
            tg.start_soon(request, name)
            await until(lambda w=waiting: nonces.waiting == w)  # type: ignore[misc]
        assert (nonces.waiting, nonces.promised) == (3, 3)
        nonces.arrived("answer-0001")
        # handed over: still promised until its request resumes (and sends its POST)
        assert (nonces.waiting, nonces.promised) == (2, 3)
        await until(lambda: "a" in got)
        assert nonces.promised == 2
        nonces.arrived("answer-0002")
        nonces.arrived("answer-0003")
    assert got == {"a": "answer-0001", "b": "answer-0002", "c": "answer-0003"}
    assert fetch.calls == 0
    assert (nonces.waiting, nonces.promised, len(nonces.pool)) == (0, 0, 0)


async def test_a_request_waits_only_for_a_nonce_no_other_request_waits_for() -> None:
    nonces, fetch = supply()
    got: list[str] = []
    nonces.expect()  # one POST in flight
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(got, nonces.take(fetch)))
        await until(lambda: nonces.waiting == 1)
        # the one nonce on its way is spoken for: the next request fetches its own
        assert await nonces.take(fetch) == "fetched-01"
        assert fetch.promised_during == [2]
        nonces.arrived("answer-0001")
    assert got == ["answer-0001"]
    assert nonces.promised == 0


async def _append(into: list[str], taking: object) -> None:
    into.append(await taking)  # type: ignore[misc]


async def test_at_the_circulation_bound_requests_wait_rather_than_fetch() -> None:
    nonces, fetch = supply(bound=2)
    got: list[str] = []
    nonces.expect()
    nonces.expect()
    async with anyio.create_task_group() as tg:
        for waiting in (1, 2, 3):
            tg.start_soon(lambda: _append(got, nonces.take(fetch)))
            await until(lambda w=waiting: nonces.waiting == w)  # type: ignore[misc]
        # the third waits too: two promised for three waiters, but the bound is reached
        assert fetch.calls == 0
        nonces.arrived("answer-0001")
        nonces.arrived("answer-0002")
        await until(lambda: len(got) == 2)
        assert (nonces.waiting, nonces.promised, fetch.calls) == (1, 0, 0)
        # an answer without a nonce wakes the last one to look again: nothing is on its
        # way now, so it asks newNonce
        nonces.expect()
        nonces.arrived(None)
    assert got == ["answer-0001", "answer-0002", "fetched-01"]
    assert nonces.promised == 0

    # below the bound, the third request (two promised, two already waiting) fetches
    nonces, fetch = supply(bound=3)
    nonces.expect()
    nonces.expect()
    async with anyio.create_task_group() as tg:
        for waiting in (1, 2):
            tg.start_soon(lambda: _append(got, nonces.take(fetch)))
            await until(lambda w=waiting: nonces.waiting == w)  # type: ignore[misc]
        assert await nonces.take(fetch) == "fetched-01"
        nonces.arrived("answer-0003")
        nonces.arrived("answer-0004")
    assert got[3:] == ["answer-0003", "answer-0004"]


async def test_an_answer_without_a_usable_nonce_wakes_a_waiter_to_look_again() -> None:
    nonces, fetch = supply()
    got: list[str] = []
    nonces.expect()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(got, nonces.take(fetch)))
        await until(lambda: nonces.waiting == 1)
        nonces.arrived("bad nonce")  # malformed: as good as none
        await until(lambda: len(got) == 1)
    assert got == ["fetched-01"]  # nothing on its way any more: it asks newNonce
    assert (nonces.promised, len(nonces.pool)) == (0, 0)


async def test_a_waiter_woken_empty_handed_takes_what_the_pool_has() -> None:
    nonces, fetch = supply()
    got: list[str] = []
    nonces.expect()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(got, nonces.take(fetch)))
        await until(lambda: nonces.waiting == 1)
        nonces.arrived(None)
        nonces.pool.put("pooled-aaaa")  # before the waiter resumes
    assert got == ["pooled-aaaa"]
    assert fetch.calls == 0


async def test_an_answer_no_one_waits_for_goes_to_the_pool() -> None:
    nonces, _ = supply()
    nonces.expect()
    assert nonces.promised == 1
    nonces.arrived(" answer-0001 ")
    assert nonces.promised == 0
    assert nonces.pool.take() == "answer-0001"
    nonces.expect()
    nonces.arrived(None)
    assert (nonces.promised, len(nonces.pool)) == (0, 0)


async def test_the_wait_for_a_slow_answer_is_bounded_once() -> None:
    nonces, fetch = supply(wait=0.05)
    nonces.expect()  # a POST the CA sits on
    with anyio.fail_after(5):
        assert await nonces.take(fetch) == "fetched-01"
    assert (nonces.waiting, nonces.promised) == (0, 1)  # the POST is still on its way
    nonces.arrived("answer-0001")  # no one waits for it any more
    assert nonces.pool.take() == "answer-0001"
    assert nonces.promised == 0


async def test_a_cancelled_waiter_no_longer_counts_as_waiting() -> None:
    nonces, fetch = supply()
    nonces.expect()
    with anyio.move_on_after(0.05):
        await nonces.take(fetch)
    assert (nonces.waiting, nonces.promised) == (0, 1)
    nonces.arrived("answer-0001")
    assert nonces.pool.take() == "answer-0001"  # not handed to the one that gave up
    assert fetch.calls == 0


async def test_a_post_held_by_the_throttle_counts_as_a_nonce_on_its_way() -> None:
    nonces, fetch = supply()
    with nonces.held():
        assert nonces.promised == 1
    assert nonces.promised == 0  # it goes on to be sent: nobody is woken

    got: list[str] = []
    released = anyio.Event()

    async def held_post() -> None:
        with nonces.held():
            await released.wait()  # the throttle gives it no token

    async with anyio.create_task_group() as tg:
        tg.start_soon(held_post)
        await until(lambda: nonces.promised == 1)
        tg.start_soon(lambda: _append(got, nonces.take(fetch)))
        await until(lambda: nonces.waiting == 1)
        assert fetch.calls == 0  # it waits for the held POST's answer
        tg.cancel_scope.cancel()  # the held POST gives up, and so does the waiter
    assert (nonces.waiting, nonces.promised) == (0, 0)


async def test_a_post_that_gives_up_in_the_throttle_wakes_a_waiter() -> None:
    nonces, fetch = supply()
    got: list[str] = []

    async def refused_post() -> None:
        with nonces.held():
            await until(lambda: nonces.waiting == 1)
            raise RuntimeError("no token")

    async def refused() -> None:
        with pytest.raises(RuntimeError, match="no token"):
            await refused_post()

    with anyio.fail_after(1):  # woken at once, not after the 5 s bound
        async with anyio.create_task_group() as tg:
            tg.start_soon(refused)
            await until(lambda: nonces.promised == 1)
            tg.start_soon(lambda: _append(got, nonces.take(fetch)))
    assert got == ["fetched-01"]  # woken at once to look again, not after the bound
    assert nonces.promised == 0


async def test_a_failed_fetch_wakes_a_request_that_counted_on_it() -> None:
    nonces, fetch = supply()
    fetch.release = anyio.Event()
    fetch.errors = [ConnectError("newNonce refused", reached_ca=False)]
    got: list[str] = []

    async def failing() -> None:
        with pytest.raises(ConnectError):
            await nonces.take(fetch)

    with anyio.fail_after(1):  # woken at once, not after the 5 s bound
        async with anyio.create_task_group() as tg:
            tg.start_soon(failing)
            await until(lambda: fetch.calls == 1)
            # the first request's newNonce is on its way: its POST will bring a nonce
            tg.start_soon(lambda: _append(got, nonces.take(fetch)))
            await until(lambda: nonces.waiting == 1)
            assert nonces.promised == 1
            fetch.release.set()  # the first fails; newNonce works for the woken request
    assert got == ["fetched-02"]
    assert fetch.calls == 2
    assert (nonces.waiting, nonces.promised) == (0, 0)


@pytest.mark.parametrize("bound", [0, -1, True, 2.5, "4", None])
def test_the_circulation_holds_at_least_one_nonce(bound: object) -> None:
    with pytest.raises(InvalidInput, match="nonce_circulation must be at least 1"):
        NonceSupply(NoncePool(), bound=bound, wait=1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="nonce_circulation must be at least 1"):
        AcmeTransport("https://ca.test/dir", nonce_circulation=bound)  # type: ignore[arg-type]
    # set later, through the transport, the same check: the supply owns its bound
    transport = AcmeTransport("https://ca.test/dir", nonce_circulation=4)
    with pytest.raises(InvalidInput, match="nonce_circulation must be at least 1"):
        transport.nonce_circulation = bound  # type: ignore[assignment]
    assert transport.nonce_circulation == 4


async def test_a_bound_raised_later_lets_the_next_request_fetch() -> None:
    nonces, fetch = supply(bound=1)
    got: list[str] = []
    nonces.expect()  # one POST on its way: at the bound
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(got, nonces.take(fetch)))
        await until(lambda: nonces.waiting == 1)
        with anyio.fail_after(5):  # at the bound, a second request would wait too
            tg.start_soon(lambda: _append(got, nonces.take(fetch)))
            await until(lambda: nonces.waiting == 2)
        assert fetch.calls == 0
        nonces.bound = 3  # e.g. AcmeTransport.nonce_circulation = 3
        assert await nonces.take(fetch) == "fetched-01"  # below the bound: fetches
        nonces.arrived("answer-0001")
        nonces.expect()
        nonces.arrived("answer-0002")
    assert got == ["answer-0001", "answer-0002"]
    assert (nonces.waiting, nonces.promised) == (0, 0)


# -- a POST whose nonce could not be fetched --------------------------------------------

KEY = AccountKey.generate("ec256")
DIRECTORY = {
    "newNonce": "https://ca.test/nonce",
    "newAccount": "https://ca.test/acct",
    "newOrder": "https://ca.test/order",
}


def _transport(nonce_answer: Callable[[httpx.Request], httpx.Response]) -> AcmeTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/dir":
            return httpx.Response(200, json=DIRECTORY)
        if request.url.path == "/nonce":
            return nonce_answer(request)
        raise AssertionError(f"sent {request.method} {request.url}")

    return AcmeTransport(
        "https://ca.test/dir",
        client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        clock=FakeClock(dt.datetime(2026, 12, 2, tzinfo=dt.UTC)),
        retry=RequestRetry(floor=0.5, cap=4, max_attempts=2),
    )


async def test_a_post_whose_new_nonce_failed_never_reached_the_ca() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    transport = _transport(refused)
    with pytest.raises(ConnectError) as info:
        await transport.post("https://ca.test/order", key=KEY, kid="k", payload={})
    assert info.value.reached_ca is False
    assert isinstance(info.value.__cause__, httpx.ConnectError)  # the chain is the same

    def timed_out(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=request)

    transport = _transport(timed_out)
    with pytest.raises(RequestTimeout) as timeout:
        await transport.new_nonce()
    assert timeout.value.reached_ca is True  # the HEAD's own: it may have reached the CA
    with pytest.raises(RequestTimeout) as timeout:
        await transport.post("https://ca.test/order", key=KEY, kid="k", payload={})
    assert str(timeout.value) == "HEAD https://ca.test/nonce timed out"
    assert timeout.value.reached_ca is False  # the POST's: it was never sent
    assert isinstance(timeout.value.__cause__, httpx.ReadTimeout)


async def test_a_post_whose_new_nonce_answered_503_raises_the_same_problem_unsent() -> None:
    transport = _transport(lambda request: httpx.Response(503, headers={"Retry-After": "0"}))
    with pytest.raises(ServerBusy) as info:
        await transport.post("https://ca.test/order", key=KEY, kid="k", payload={})
    assert info.value.reached_ca is False
    assert info.value.status_code == 503


def test_an_unsent_copy_is_the_same_error_built_with_reached_ca_false() -> None:
    try:
        try:
            raise OSError("reset")
        except OSError as cause:
            raise ServerBusy(
                "urn:ietf:params:acme:error:serverInternal",
                "busy",
                status_code=500,
                url="https://ca.test/nonce",
            ) from cause
    except ServerBusy as error:
        error.add_note("seen by the test")
        original = error
    copy = _unsent(original)
    assert copy is not original
    assert type(copy) is ServerBusy
    assert (str(copy), copy.args, copy.type, copy.detail) == (
        str(original),
        original.args,
        original.type,
        original.detail,
    )
    assert (copy.status_code, copy.url, copy.kind) == (500, "https://ca.test/nonce", original.kind)
    assert copy.__notes__ == ["seen by the test"]
    assert copy.__traceback__ is original.__traceback__
    assert copy.reached_ca is False
    assert original.reached_ca is True  # the newNonce request's own error is left alone
