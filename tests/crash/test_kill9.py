"""kill -9 at every step of an issuance, then restart: nothing lost, nothing ordered twice.

A child process (``tests/integration/manager_child.py``: a ``CertificateManager`` with a
``FileStorage``, dns-01 through pebble-challtestsrv) is told by
``ACMECERTS_TEST_CRASH_AT=<step>`` to SIGKILL itself at one step of an issuance: a
request about to be sent or an answer just received (transport hooks), the solver's
``present``, or a write of the store (before or after it, or inside FileStorage's atomic
write: half a temp file, a complete temp file not yet renamed). Then the manager is
started again on the same state directory (in the test's process: a fresh client, store
and manager; the dead child's store lock is taken over at once, its pid being gone) and
must finish the job. After the kill and after the restart:

* every stored file loads through FileStorage (no StorageError: nothing corrupt or
  half-written), hidden files are only temp files and lease files, every mode is
  0600/0700, and once the restart is done no temp file is left;
* the account key is the one from before (same thumbprint);
* the order in flight is resumed: one ``newOrder`` for the certificate in all (counted
  by a recording proxy per scenario, and cross-checked against Pebble's own log), one
  ``finalize`` in all, and a certificate issued but not saved is downloaded again from
  the order rather than ordered again;
* the certificate key chosen before the kill (kept with the order record) is the key
  that gets certified: a ``ready`` order is finalized with it, a ``processing`` or
  ``valid`` one is only downloaded.

Killed between the CA's answer to ``newOrder`` and recording it, the restart finds the
order the CA created in the account's orders list (RFC 8555 §7.1.2.1), because the
record written just before ``newOrder`` says an order may exist. A CA without that list
(Let's Encrypt) gets a second ``newOrder`` in that one window.

The scenarios run a few at a time (each has its own proxy and state directory).
"""

from __future__ import annotations

import concurrent.futures
import signal

import pytest

from acmecerts.testing import PebbleServer
from tests.crash._scenario import ACCOUNT_STEPS, Scenario, run_scenario
from tests.integration.manager_child import CRASH_POINTS

STEPS = list(CRASH_POINTS)
#: Steps after which the CA has accepted the finalize: the restart must not send another.
AFTER_FINALIZE = frozenset(STEPS[STEPS.index("finalize-answered") :])
#: Issued, downloaded, not (completely) saved: the restart downloads it again.
DOWNLOAD_AGAIN = frozenset(
    {"download-answered", "cert-half-written", "cert-tmp-written", "record-write"}
)
#: The kill left only the intent written before newOrder (the order's URL unrecorded).
INTENT_ONLY = frozenset({"neworder-sent", "neworder-answered"})
#: The store was left with a temp file by the kill (inside FileStorage's write).
LEAVES_TEMP = frozenset({"account-key-write", "cert-half-written", "cert-tmp-written"})


def _orders_seen(pebble: PebbleServer) -> int:
    return sum(1 for m, p in pebble.requests_seen() if (m, p) == ("POST", "/order-plz"))


@pytest.fixture(scope="module")
def scenarios(
    pebble: PebbleServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Scenario]:
    """Every scenario, run once (four at a time); Pebble's newOrder count cross-checks."""
    workdir = tmp_path_factory.mktemp("crash")
    before = _orders_seen(pebble)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {step: pool.submit(run_scenario, pebble, step, workdir) for step in STEPS}
        done = {step: future.result(timeout=150) for step, future in futures.items()}
    # every order Pebble created was seen (and counted) by a scenario's proxy
    counted = sum(
        run.requests["newOrder"] + run.requests["newOrder refused"]
        for s in done.values()
        for run in (s.crashed, s.restarted, s.renewed)
        if run is not None
    )
    assert _orders_seen(pebble) - before == counted
    for step, s in done.items():  # shown with -s: what each restart had to do
        crashed, restarted = dict(s.crashed.requests), dict(s.restarted.requests)
        print(f"{step:20} crashed: {crashed}  restart: {restarted}")
    return done


@pytest.mark.timeout(180)
@pytest.mark.parametrize("step", STEPS)
def test_kill_9_then_restart(step: str, scenarios: dict[str, Scenario]) -> None:
    s = scenarios[step]
    crashed, restarted = s.crashed, s.restarted

    # the process died at the step, and the store is intact
    assert crashed.code == -signal.SIGKILL, f"no crash at {step}: {crashed.stderr[-3000:]}"
    assert crashed.lines[-1] == {"crashing": step}
    assert crashed.problems == []
    assert bool(crashed.temps) == (step in LEAVES_TEMP), crashed.temps
    if s.thumbprint_before is not None:
        assert crashed.thumbprint == s.thumbprint_before

    # the restart issued the certificate, saved it completely and cleaned up
    assert restarted.code == 0, restarted.stderr[-3000:]
    [result] = restarted.lines
    assert result["kind"] == "IssuedResult", result
    assert restarted.problems == []
    assert restarted.temps == []  # a crashed writer's temp file goes with the next write
    assert s.stored_serial == result["serial"]
    assert not s.order_record_left
    # the account key survived (the account steps: the key that was stored by then)
    assert restarted.thumbprint is not None
    if crashed.thumbprint is not None:
        assert restarted.thumbprint == crashed.thumbprint
    if step in ACCOUNT_STEPS:
        assert crashed.requests["newOrder"] == 0

    # one newOrder and one finalize in all: the order in flight was resumed
    total = crashed.requests + restarted.requests
    assert total["newOrder"] == 1, (step, crashed.requests, restarted.requests)
    assert total["finalize"] == 1, (step, crashed.requests, restarted.requests)
    if step not in {"neworder-sent", *ACCOUNT_STEPS}:
        assert crashed.requests["newOrder"] == 1  # the order existed when it died ...
        assert restarted.requests["newOrder"] == 0  # ... and the restart did not order again
    if step in AFTER_FINALIZE:
        assert crashed.requests["finalize"] == 1
    if step in DOWNLOAD_AGAIN:
        assert crashed.requests["download"] >= 1  # issued before the kill ...
        assert restarted.requests["download"] >= 1  # ... and fetched again from the order

    # the certificate key chosen before the kill (kept with the order) is the one certified
    if step not in ACCOUNT_STEPS:
        assert s.record_after_crash is not None
        order_url, key = s.record_after_crash
        assert (order_url is None) == (step in INTENT_ONLY)
        assert s.certified_key == key


def test_newOrder_answered_but_unrecorded_is_found_in_the_orders_list(
    scenarios: dict[str, Scenario],
) -> None:
    """Killed between the CA's answer to newOrder and recording it: the record says an
    order was being created, so the restart looks in the account's orders list (RFC
    8555 §7.1.2.1) and finishes that order instead of ordering again."""
    s = scenarios["neworder-answered"]
    assert s.crashed.requests["newOrder"] == 1
    assert s.restarted.requests["ordersList"] >= 1
    assert s.restarted.requests["newOrder"] == 0


def test_order_record_left_after_the_save_does_not_hijack_the_renewal(
    scenarios: dict[str, Scenario],
) -> None:
    """Killed after the certificate was saved, its order record left (it is kept: the
    record names the saved certificate's order, finished by that rule): the restart uses
    the saved certificate (no request for it), and a renewal orders a new certificate
    instead of resuming the old, valid order."""
    s = scenarios["record-saved"]
    assert s.restarted.requests["newOrder"] == 0
    assert s.restarted.requests["download"] == 0
    [first] = s.crashed.lines[-1:]
    assert first == {"crashing": "record-saved"}
    assert s.renewed is not None
    assert s.renewed.code == 0, s.renewed.stderr[-3000:]
    [renewal] = s.renewed.lines
    [restart] = s.restarted.lines
    assert renewal["kind"] == "IssuedResult"
    assert renewal["serial"] != restart["serial"]
    assert renewal["order_url"] != restart["order_url"]
    assert s.renewed.requests["newOrder"] == 1
    assert s.renewed.problems == []
