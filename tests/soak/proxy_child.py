"""A FaultProxy with random faults, in its own process (run as a script, not collected).

    python tests/soak/proxy_child.py --upstream URL --cert PEM --key PEM --ca PEM \
        --rate 0.15 --seed 1 --records OUT.json

Prints one JSON line ``{"directory": URL}`` once it listens. Faults start with a
``go`` line on stdin; at end of input the proxy stops and writes every request it saw to
``--records`` (method, path, arrival and response instants, status, the fault and a
digest of the JWS payload). Running apart from the soak keeps the proxy's threads,
sockets and memory out of the soak's own measurements.
"""

from __future__ import annotations

import argparse
import base64
import email.utils
import hashlib
import json
import random
import sys
import threading
import time

from tests.faults.proxy import (
    RATE_LIMITED,
    SERVER_INTERNAL,
    BadNonce,
    Fault,
    FaultProxy,
    RecordedRequest,
    Reset,
    Respond,
    SlowBody,
    Stall,
    Truncate,
)


def random_fault(rng: random.Random) -> Fault:
    """One fault, drawn from a fixed mix."""
    kind = rng.choices(
        ["500", "503", "429", "429-date", "badNonce", "reset", "stall", "slow", "truncate"],
        weights=[2, 2, 2, 1, 3, 1, 1, 1, 1],
    )[0]
    if kind == "500":
        return Respond(500, SERVER_INTERNAL, detail="injected")
    if kind == "503":
        return Respond(503, retry_after=str(rng.randint(1, 3)), replay_nonce=False)
    if kind == "429":
        return Respond(429, RATE_LIMITED, detail="injected", retry_after=str(rng.randint(1, 3)))
    if kind == "429-date":
        when = email.utils.formatdate(time.time() + rng.uniform(1.5, 3.0), usegmt=True)
        return Respond(429, RATE_LIMITED, detail="injected", retry_after=when)
    if kind == "badNonce":
        return BadNonce()
    if kind == "reset":
        return Reset()
    if kind == "stall":
        return Stall(rng.uniform(0.5, 5.0))
    if kind == "slow":
        return SlowBody(rng.uniform(500.0, 4000.0))
    return Truncate()


def payload_digest(body: bytes) -> str:
    """A short digest of a JWS body's payload ('' for requests without one)."""
    if not body:
        return ""
    try:
        payload = json.loads(body)["payload"]
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    except (ValueError, KeyError, TypeError):
        return "?"
    return hashlib.sha256(raw).hexdigest()[:16]


def record(request: RecordedRequest) -> dict[str, object]:
    fault = request.fault
    retry_after = None
    if isinstance(fault, Respond):
        retry_after = fault.retry_after
    return {
        "method": request.method,
        "path": request.path,
        "arrival": request.arrival,
        "wall": request.wall.timestamp(),
        "responded": request.responded,
        "status": request.status,
        "fault": None if fault is None else type(fault).__name__,
        "fault_status": fault.status if isinstance(fault, Respond) else None,
        "stall": fault.seconds if isinstance(fault, Stall) else None,
        "retry_after": retry_after,
        "payload": payload_digest(request.body),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--records", required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    enabled = threading.Event()

    def hook(method: str, path: str, body: bytes) -> Fault | None:
        if not enabled.is_set() or rng.random() >= args.rate:
            return None
        fault = random_fault(rng)
        if isinstance(fault, BadNonce) and method != "POST":
            # only a JWS carries a nonce to refuse (and a HEAD answer has no problem body)
            return Respond(500, SERVER_INTERNAL, detail="injected")
        return fault

    proxy = FaultProxy(args.upstream, certfile=args.cert, keyfile=args.key, upstream_ca=args.ca)
    proxy.request_hook = hook
    with proxy:
        print(json.dumps({"directory": proxy.directory_url}), flush=True)
        for line in sys.stdin:
            if line.strip() == "go":
                enabled.set()
        requests = proxy.requests
    with open(args.records, "w", encoding="utf-8") as out:
        json.dump([record(r) for r in requests], out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
