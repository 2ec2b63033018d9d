"""Summarise a py-spy profile of an acmecerts benchmark run by cost centre.

    python bench/run.py --sizes 200 --multi 0 --clients acmecerts --py-spy /tmp/spy
    python bench/profile_report.py /tmp/spy/acmecerts-r1.txt [--top 25]

Input: py-spy ``--format raw`` (collapsed stacks, ``frame;frame;... count``), recorded with
idle samples excluded, so the shares are shares of the client's busy time (see OFF_CPU_LEAF
for the one correction made), or a cProfile ``.prof`` (grouped by self and cumulative time).
A py-spy sample is put in one *stage* when any frame of its stack belongs to it (key
generation, CSR, JWS signing, parsing answers, checking the certificate, the http-01 solver),
otherwise in the *layer* of its innermost frame (h2, httpcore, httpx, TLS, asyncio, anyio,
retry, ...). Also prints the top functions by self samples and by inclusive samples.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

# (stage, regex on one frame): the first stage with a matching frame anywhere in the stack wins
STAGES = [
    ("key generation", r"^generate_private_key \(acmecerts/protocol/keys\.py"),
    ("CSR building", r"^build_csr \("),
    ("JWS signing (ECDSA + header)", r"^sign_request \(acmecerts/protocol/jws\.py"),
    ("parsing answers", r"^parse_\w+ \(acmecerts/protocol/resources\.py"),
    ("problem documents", r"\(acmecerts/protocol/problems\.py"),
    (
        "certificate download checks / PEM",
        r"\(acmecerts/protocol/certificate\.py|^private_key_pem ",
    ),
    ("http-01 solver", r"\(acmecerts/solvers/"),
    ("rate-limit ledger", r"\(acmecerts/ratelimit/"),
    ("logging", r"\(logging/"),
]

# (layer, regex on the innermost frame), first match wins
LAYERS = [
    ("TLS (ssl / asyncio sslproto)", r"\((ssl\.py|asyncio/sslproto\.py)"),
    ("h2 + hpack", r"\((h2|hpack|hyperframe)/"),
    ("h11", r"\(h11/"),
    ("httpcore", r"\(httpcore/"),
    ("httpx", r"\(httpx/"),
    ("anyio", r"\(anyio/"),
    ("asyncio event loop / streams", r"\(asyncio/|\(selectors\.py"),
    ("tenacity", r"\(tenacity/"),
    ("acmecerts retry", r"\(acmecerts/retry\.py"),
    ("acmecerts transport", r"\(acmecerts/transport/"),
    ("acmecerts nonce pool", r"\(acmecerts/transport/_nonces\.py"),
    ("acmecerts client", r"\(acmecerts/client/"),
    ("acmecerts issuance flow", r"\(acmecerts/protocol/_(flow|polling)\.py"),
    ("acmecerts time", r"\(acmecerts/_time/"),
    ("acmecerts other", r"\(acmecerts/"),
    ("json", r"\(json/"),
    ("josepy (outside signing)", r"\(josepy/"),
    ("acme (outside parsing)", r"\(acme/"),
    ("cryptography (outside stages)", r"\(cryptography/"),
    ("typing / dataclasses / enum", r"\((typing|dataclasses|enum|abc)\.py"),
]


def load(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def _short(frame: str) -> str:
    return re.sub(r":\d+\)$", ")", frame)


#: py-spy counts a thread as busy whenever it is runnable, also while the scheduler has it
#: preempted. On a loaded 2-core machine that happens mostly right after a loopback send()
#: wakes Pebble: ~20-30 % of samples land in asyncio's socket write although perf (on-CPU
#: only) puts all kernel time of the client at ~5 % and getrusage's system time agrees. Those
#: samples are dropped by default (``--keep-off-cpu`` keeps them).
OFF_CPU_LEAF = re.compile(r"^_SelectorSocketTransport\.write \(asyncio/selector_events\.py")


def report(stacks: list[tuple[list[str], int]], top: int, keep_off_cpu: bool = False) -> str:
    dropped = 0
    if not keep_off_cpu:
        kept = [(f, c) for f, c in stacks if not OFF_CPU_LEAF.search(f[-1])]
        dropped = sum(c for _, c in stacks) - sum(c for _, c in kept)
        stacks = kept
    total = sum(c for _, c in stacks) or 1
    stages: collections.Counter[str] = collections.Counter()
    inner_by_stage: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    stage_res = [(name, re.compile(rx)) for name, rx in STAGES]
    layer_res = [(name, re.compile(rx)) for name, rx in LAYERS]
    for frames, count in stacks:
        leaf = frames[-1]
        self_time[_short(leaf)] += count
        for frame in {_short(f) for f in frames}:
            inclusive[frame] += count
        stage = next((name for name, rx in stage_res if any(rx.search(f) for f in frames)), None)
        if stage is None:
            stage = next((name for name, rx in layer_res if rx.search(leaf)), "other")
            stage = f"[layer] {stage}"
        stages[stage] += count
        inner_by_stage[stage][_short(leaf)] += count

    out = [
        f"{total} samples (100 % = the client's busy samples in the measured phase"
        + (
            f"; {dropped} samples in asyncio's socket write dropped as off-CPU)" if dropped else ")"
        ),
        "",
    ]
    out.append("By stage / layer:")
    for stage, count in stages.most_common():
        hottest = ", ".join(
            f"{f} {100 * c / total:.1f}%" for f, c in inner_by_stage[stage].most_common(2)
        )
        out.append(f"  {100 * count / total:5.1f} %  {stage:45}  hottest: {hottest}")
    out += ["", f"Top {top} functions by self samples:"]
    for frame, count in self_time.most_common(top):
        out.append(f"  {100 * count / total:5.1f} %  {frame}")
    out += ["", f"Top {top} functions by inclusive samples (below the event loop):"]
    shown = 0
    skip = re.compile(
        r"\((asyncio/(base_events|events|runners)\.py|anyio/_core/_eventloop\.py"
        r"|anyio/_backends/_asyncio\.py|acmecerts_client\.py)|^<module>|_run_coro"
    )
    for frame, count in inclusive.most_common():
        if skip.search(frame):
            continue
        out.append(f"  {100 * count / total:5.1f} %  {frame}")
        shown += 1
        if shown == top:
            break
    return "\n".join(out)


# cProfile: inclusive (cumulative) time of these functions, as (label, file suffix, name)
PROF_STAGES = [
    ("HTTP request through httpx (AsyncClient.request)", "httpx/_client.py", "request"),
    ("JWS signing (sign_request)", "acmecerts/protocol/jws.py", "sign_request"),
    ("parse order", "acmecerts/protocol/resources.py", "parse_order"),
    ("parse authorization", "acmecerts/protocol/resources.py", "parse_authorization"),
    ("parse challenge", "acmecerts/protocol/resources.py", "parse_challenge"),
    ("certificate key", "acmecerts/protocol/keys.py", "generate_private_key"),
    ("CSR", "acmecerts/protocol/csr.py", "build_csr"),
    ("download: parse chain", "acmecerts/protocol/certificate.py", "parse_pem_chain"),
    (
        "download: check key + names",
        "acmecerts/protocol/certificate.py",
        "check_certificate_matches",
    ),
    ("download: certificate info", "acmecerts/protocol/certificate.py", "certificate_info"),
    ("download: private key PEM", "acmecerts/protocol/keys.py", "private_key_pem"),
    ("retry wrapper (retry_request)", "acmecerts/retry.py", "retry_request"),
    ("http-01 solver (serving the VA)", "acmecerts/solvers/http01.py", "_serve_connection"),
    ("h2: receiving (httpcore _receive_events)", "httpcore/_async/http2.py", "_receive_events"),
    (
        "h2: sending (httpcore _write_outgoing_data)",
        "httpcore/_async/http2.py",
        "_write_outgoing_data",
    ),
    ("httpx URL parsing (httpx._urlparse.urlparse)", "httpx/_urlparse.py", "urlparse"),
    (
        "httpcore pool assignment",
        "httpcore/_async/connection_pool.py",
        "_assign_requests_to_connections",
    ),
    ("anyio fail_after/move_on_after", "anyio/_core/_tasks.py", "fail_after"),
    ("asyncio event loop select", "selectors.py", "select"),
    ("garbage collector (gc.collect)", "~", "<built-in method gc.collect>"),
]


def report_prof(path: Path, top: int) -> str:
    """Group a cProfile (``.prof``) by layer (self time) and by stage (cumulative time)."""
    import pstats

    stats = pstats.Stats(str(path))
    entries = stats.stats  # type: ignore[attr-defined]
    total = stats.total_tt or 1  # type: ignore[attr-defined]
    layer_res = [(name, re.compile(rx)) for name, rx in LAYERS]
    layers: collections.Counter[str] = collections.Counter()
    selfs: collections.Counter[str] = collections.Counter()
    for (filename, line, name), (_cc, _nc, tt, _ct, _callers) in entries.items():
        frame = f"{name} ({_rel(filename)}:{line})"
        selfs[_short(frame)] += tt
        if filename == "~":
            layer = "C functions (builtins, ssl, socket, crypto)"
        else:
            layer = next((n for n, rx in layer_res if rx.search(frame)), "other")
        layers[layer] += tt
    out = [f"cProfile, {total:.2f} s in total (timer as recorded; CPU if process_time)", ""]
    out.append("Self time by layer:")
    for layer, tt in layers.most_common():
        out.append(f"  {100 * tt / total:5.1f} %  {layer}")
    out += ["", "Inclusive time of stages (they overlap; 100 % = all):"]
    for label, suffix, name in PROF_STAGES:
        ct = sum(v[3] for (f, _l, n), v in entries.items() if n == name and f.endswith(suffix))
        if ct:
            out.append(f"  {100 * ct / total:5.1f} %  {label}")
    out += ["", f"Top {top} functions by self time:"]
    for frame, tt in selfs.most_common(top):
        out.append(f"  {100 * tt / total:5.1f} %  {frame}")
    return "\n".join(out)


def _rel(filename: str) -> str:
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "profile", type=Path, nargs="+", help="py-spy raw file(s) or cProfile .prof file(s)"
    )
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--keep-off-cpu", action="store_true", help="keep samples in asyncio's socket write"
    )
    args = parser.parse_args()
    for path in args.profile:
        print(f"== {path}")
        if path.suffix == ".prof":
            print(report_prof(path, args.top))
        else:
            print(report(load(path), args.top, args.keep_off_cpu))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
