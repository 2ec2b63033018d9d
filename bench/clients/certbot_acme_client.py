"""certbot's ``acme`` library: one ``ClientV2``, certificates issued from a thread pool.

The documented flow per certificate: fresh P-256 key and CSR (``acme.crypto_util.make_csr``),
``new_order`` (which also fetches every authorization), answer each http-01 challenge
(``answer_challenge``), then ``poll_and_finalize`` (its own polling: 1 s between authorization
polls, ``Retry-After`` or 1 s for the order). The account key is P-256 (ES256). The pool has
``--threads`` workers (default: one per certificate, capped at 200). http-01 is answered by the
shared ``ChallengeResponder`` running in a background thread of this process.

Runs in its own venv (``setup_peers.sh``); see ``_common.py`` for the protocol with run.py.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import josepy as jose
from acme import challenges, client, crypto_util, messages
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChallengeResponder, Phase, count_certificates, names_for, parse_args


def _extra(parser) -> None:
    parser.add_argument("--threads", type=int, default=0, help="pool size (0: one per cert)")


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], _extra)
    responder = ChallengeResponder(args.http_port)
    responder.start_in_thread()

    account_key = jose.JWKEC(key=ec.generate_private_key(ec.SECP256R1()))
    net = client.ClientNetwork(
        account_key, alg=jose.ES256, verify_ssl=args.ca, user_agent="bench-certbot-acme"
    )
    acme = client.ClientV2(client.ClientV2.get_directory(args.directory, net), net=net)
    acme.new_account(messages.NewRegistration.from_data(terms_of_service_agreed=True))

    def one(i: int) -> int:
        key = ec.generate_private_key(ec.SECP256R1())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        csr_pem = crypto_util.make_csr(key_pem, names_for(args, i))
        order = acme.new_order(csr_pem)
        for authzr in order.authorizations:
            if authzr.body.status == messages.STATUS_VALID:
                continue
            challb = next(
                c for c in authzr.body.challenges if isinstance(c.chall, challenges.HTTP01)
            )
            response, validation = challb.response_and_validation(account_key)
            responder.tokens[challb.chall.encode("token")] = validation
            acme.answer_challenge(challb, response)
        order = acme.poll_and_finalize(order)
        return count_certificates(order.fullchain_pem) > 0

    threads = args.threads or min(args.count, 200)
    errors: list[str] = []
    issued = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        phase = Phase()
        phase.ready_and_wait(threads=threads)
        futures = [pool.submit(one, i) for i in range(args.count)]
        for future in futures:
            try:
                issued += future.result()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    phase.done(issued=issued, errors=errors, threads=threads)


if __name__ == "__main__":
    main()
