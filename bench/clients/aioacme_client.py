"""aioacme (PyPI, asyncio): one ``Client``, certificates issued with ``asyncio.gather``.

The flow of aioacme's README, with a P-256 certificate key instead of RSA-2048 (every client
in the benchmark uses P-256): ``new_order``, ``get_authorization``, ``answer_challenge``,
poll the authorization every ``--poll`` seconds (the README's 1 s) until valid,
``finalize_order``, poll the order the same way, ``get_certificate``. aioacme leaves polling
to the caller; the interval is the README's. http-01 is answered by the shared
``ChallengeResponder`` on the same event loop. The account key is P-256 (ES256).

Runs in its own venv (``setup_peers.sh``); see ``_common.py`` for the protocol with run.py.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from pathlib import Path

import aioacme
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChallengeResponder, LoopLag, Phase, count_certificates, names_for, parse_args


def _extra(parser) -> None:
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between polls")


async def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], _extra)
    responder = ChallengeResponder(args.http_port)
    await responder.start()
    ctx = ssl.create_default_context(cafile=args.ca)
    done_states = {aioacme.AuthorizationStatus.valid, aioacme.AuthorizationStatus.invalid}
    order_done = {aioacme.OrderStatus.valid, aioacme.OrderStatus.invalid}

    async with aioacme.Client(
        account_key=ec.generate_private_key(ec.SECP256R1()),
        directory_url=args.directory,
        ssl=ctx,
    ) as acme:
        await acme.get_account()  # registers: the warm-up

        async def one(i: int) -> int:
            names = names_for(args, i)
            order = await acme.new_order([aioacme.Identifier(n) for n in names])

            async def solve(uri: str) -> None:
                authz = await acme.get_authorization(uri)
                if authz.status is aioacme.AuthorizationStatus.valid:
                    return
                challenge = next(
                    c for c in authz.challenges if c.type is aioacme.ChallengeType.http01
                )
                responder.tokens[challenge.token] = (
                    f"{challenge.token}.{acme._account_key_jwk_thumbprint}"
                )
                await acme.answer_challenge(challenge.url)
                while authz.status not in done_states:
                    await asyncio.sleep(args.poll)
                    authz = await acme.get_authorization(uri)
                if authz.status is aioacme.AuthorizationStatus.invalid:
                    raise RuntimeError(f"authorization invalid: {authz}")

            await asyncio.gather(*(solve(u) for u in order.authorizations))
            key = ec.generate_private_key(ec.SECP256R1())
            csr = (
                x509.CertificateSigningRequestBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .add_extension(
                    x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
                )
                .sign(key, hashes.SHA256())
            )
            order = await acme.finalize_order(order.finalize, csr)
            while order.status not in order_done:
                await asyncio.sleep(args.poll)
                order = await acme.get_order(order.uri)
            if order.status is aioacme.OrderStatus.invalid:
                raise RuntimeError(f"order invalid: {order}")
            return count_certificates(await acme.get_certificate(order.certificate)) > 0

        phase = Phase()
        phase.ready_and_wait()
        lag = LoopLag()
        lag.start()
        results = await asyncio.gather(*(one(i) for i in range(args.count)), return_exceptions=True)
        errors = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
        phase.done(
            issued=sum(r for r in results if isinstance(r, int)), errors=errors, **lag.stop()
        )
    await responder.stop()


if __name__ == "__main__":
    asyncio.run(main())
