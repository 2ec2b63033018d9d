"""One certificate, once: issue it and write fullchain.pem and privkey.pem.

    python examples/one_off.py example.com www.example.com --out ./certs

Configuration (flag, else environment variable, else default):
  --directory   ACMECERTS_DIRECTORY   the CA (default: Let's Encrypt *staging*)
  --ca-bundle   ACMECERTS_CA_BUNDLE   extra CA certificate to trust for the CA's HTTPS
  --http-port   ACMECERTS_HTTP_PORT   where to answer http-01 (the CA connects to 80)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import anyio

from acmecerts import AcmeClient, Http01Server, IssuedCertificate

STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"


# --8<-- [start:issue]
async def obtain(
    names: list[str], *, directory: str, ca_bundle: str | None, port: int
) -> IssuedCertificate:
    async with (
        Http01Server(port=port) as solver,
        AcmeClient(directory, ca_bundle=ca_bundle) as client,
    ):
        return await client.issue(names, solver=solver)


def save(cert: IssuedCertificate, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "fullchain.pem").write_text(cert.fullchain_pem)
    fd = os.open(out / "privkey.pem", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file existed with another mode
    with os.fdopen(fd, "w") as key_file:
        key_file.write(cert.private_key_pem)


# --8<-- [end:issue]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", metavar="NAME")
    parser.add_argument("--out", type=Path, default=Path("certs"))
    parser.add_argument("--directory", default=os.environ.get("ACMECERTS_DIRECTORY", STAGING))
    parser.add_argument("--ca-bundle", default=os.environ.get("ACMECERTS_CA_BUNDLE"))
    parser.add_argument(
        "--http-port", type=int, default=int(os.environ.get("ACMECERTS_HTTP_PORT", "80"))
    )
    args = parser.parse_args(argv)
    cert = anyio.run(
        lambda: obtain(
            args.names, directory=args.directory, ca_bundle=args.ca_bundle, port=args.http_port
        )
    )
    save(cert, args.out)
    print(f"issued {', '.join(cert.names)} (serial {cert.serial}) until {cert.not_after}")
    print(f"wrote {args.out / 'fullchain.pem'} and {args.out / 'privkey.pem'}")


if __name__ == "__main__":
    main()
