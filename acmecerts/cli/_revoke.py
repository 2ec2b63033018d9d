"""``acmecerts revoke PATH|NAME``: by the account key, or by the certificate's own key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from acmecerts.client import RevocationReason
from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.manager import mark_revoked
from acmecerts.protocol.certificate import CertificateChain, certificate_info, parse_pem_chain
from acmecerts.protocol.keys import PrivateKey, load_private_key

from ._args import CommonArgs
from ._ca import CaPlan, ca_client, open_client
from ._constants import ExitCode
from ._findca import StateCas, ambiguous, state_cas
from ._interrupt import run_interruptible
from ._report import Report, run_guarded
from ._state import certificate_name

__all__ = ["run_revoke"]


def _reason(value: str) -> tuple[str, int]:
    for name, code in RevocationReason.ALL.items():
        if value.strip().lower() in (name.lower(), str(code)):
            return name, code
    choices = ", ".join(RevocationReason.ALL)
    raise InvalidInput(f"--reason {value!r}: choose one of {choices}")


def _read_pem_file(target: Path) -> tuple[Path, bytes]:
    path = target / "cert.pem" if target.is_dir() else target
    try:
        return path, path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc


def run_revoke(target: str, *, reason: str, cert_key: Path | None, common: CommonArgs) -> int:
    """Run ``acmecerts revoke``; return the exit code."""

    def work(report: Report) -> int:
        reason_name, reason_code = _reason(reason)
        certificate_key: PrivateKey | None = None
        if cert_key is not None:
            try:
                certificate_key = load_private_key(cert_key.expanduser().read_bytes())
            except OSError as exc:
                raise InvalidInput(
                    f"cannot read --cert-key {cert_key}: {exc.strerror or exc}"
                ) from exc
            except InvalidInput as exc:
                raise InvalidInput(f"--cert-key {cert_key}: {exc}") from None
        candidate = Path(target).expanduser()
        given: CertificateChain | None = None
        source = target
        if candidate.exists():
            path, pem = _read_pem_file(candidate)
            source = str(path)
            try:
                given = parse_pem_chain(pem)
            except AcmeCertsError:
                raise InvalidInput(f"{path} holds no PEM certificate") from None

        # A file names no CA: the one whose state holds it, else --directory (or Let's
        # Encrypt's) as before; a stored certificate's name: the CA that holds it.
        cas = state_cas(common, json_mode=report.json_mode, empty_ok=given is not None)

        async def main() -> dict[str, Any]:
            if given is None:
                ca, chain = await _stored_chain(cas, target)
            else:
                chain = given
                ca = await _holder(cas, certificate_info(chain.leaf).serial) or cas.default
            state = ca.state
            info = certificate_info(chain.leaf)
            if certificate_key is not None:
                async with ca_client(ca) as client:
                    await client.revoke(
                        chain.pem, reason=reason_code, certificate_key=certificate_key
                    )
            else:
                async with open_client(ca, create=False) as client:
                    await client.revoke(chain.pem, reason=reason_code)
            marked = await mark_revoked(state.storage, state.layout, info.serial)
            return {
                "status": "revoked",
                "serial": info.serial,
                "names": list(info.names),
                "reason": reason_name,
                "source": source,
                "stored_name": marked,
            }

        result = run_interruptible(main, json_mode=report.json_mode)
        if report.json_mode:
            report.json(result)
        else:
            title = Text("Certificate revoked: ", style="bold green")
            title.append(", ".join(result["names"]), style="bold")
            rows = [("serial", result["serial"]), ("reason", reason_name)]
            if result["stored_name"]:
                rows.append(("renewal", "at the next `acmecerts renew` (stored certificate)"))
            report.rows(title, rows)
        return ExitCode.OK

    return run_guarded(common, work)


async def _stored_chain(cas: StateCas, target: str) -> tuple[CaPlan, CertificateChain]:
    """The stored certificate ``target`` and its CA (exit 2: none, or several CAs)."""
    name = certificate_name(target)
    found = []
    for ca in cas.plans:
        stored = await ca.state.load_certificate(name)
        if stored is not None:
            found.append((ca, stored.chain))
    if not found:
        where = f" for {cas.plans[0].directory}" if cas.chosen else ""
        raise InvalidInput(
            f"{target!r} is neither a file nor a certificate in {cas.root}{where} "
            "(see `acmecerts status`)"
        )
    if len(found) > 1:
        raise ambiguous(f"the certificate {name}", cas.root, [ca for ca, _ in found])
    return found[0]


async def _holder(cas: StateCas, serial: str) -> CaPlan | None:
    """The CA whose state holds the certificate with this serial, if one does."""
    for ca in cas.plans:
        if any(stored.info.serial == serial for stored in await ca.state.list_certificates()):
            return ca
    return None
