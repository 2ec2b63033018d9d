"""``acmecerts import certbot [DIR]``: certbot's lineages into the state directory.

Each ``DIR/renewal/NAME.conf`` is read and checked first (:mod:`acmecerts.storage.certbot`):
its CA, its certificate and key (the chain must belong to the key and the names), its key
type, how its http-01 challenges were answered (webroot, or standalone on a port) and its
hooks. A lineage that cannot be read is reported with the file that is wrong, and nothing is
written for it; the other lineages are imported.

A lineage is written as ``issue`` would have stored it, through the same writers: the
CA's settings (``cli-settings.json``: the directory URL and ``--ca-bundle``), then the
CLI's record (names, ``--out``, key type, webroot, challenge settings, hooks) and the
certificate (:func:`acmecerts.manager.import_certificate`: never replacing one). With
``--account`` certbot's account key and URL are stored first (the CA's account of the
state directory; refused if the state directory already holds another key for that CA),
so that the next ``renew`` orders with the same account and names the certificate it replaces (ARI
``replaces``). Without it, renewals order with acmecerts' own account, and the CA refuses
``replaces`` for a certificate of another account; the manager then orders without it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.manager import CertificateRecord, StoredChallenge, import_certificate
from acmecerts.storage import VersionConflict
from acmecerts.storage.certbot import CertbotLineage, read_account, read_lineage, renewal_confs
from acmecerts.storage.export import OUT_LAYOUTS

from ._args import CommonArgs
from ._constants import ExitCode
from ._interrupt import run_interruptible
from ._report import Report, run_guarded
from ._state import State, default_state_dir

__all__ = ["ImportArgs", "import_lineage", "run_import"]


@dataclasses.dataclass(frozen=True, slots=True)
class ImportArgs:
    """Options of ``acmecerts import certbot``."""

    directory: Path = Path("/etc/letsencrypt")
    account: bool = False
    out: Path | None = None
    out_layout: str = "plain"


def _out(state: State, args: ImportArgs, name: str) -> Path:
    if args.out_layout == "certbot":
        return (args.out or state.root / "certbot").expanduser().absolute()
    if args.out is not None:
        return args.out.expanduser().absolute() / name
    return state.default_out(name)


async def _import_account(state: State, lineage: CertbotLineage, directory: Path) -> None:
    if lineage.account_id is None:
        raise InvalidInput(f"certbot file {lineage.conf}: it names no account")
    key, url = read_account(directory, lineage.server, lineage.account_id)
    held = await state.load_account_key()
    if held is not None and held != key:
        raise InvalidInput(
            f"{state.path_for(state.layout.account_key())} already holds another account "
            f"key for {lineage.server}: import without --account (renewals then use it)"
        )
    if held is None:
        try:
            await state.storage.store(
                state.layout.account_key(), key.to_pem(), secret=True, expect_version=None
            )
        except VersionConflict:
            raise InvalidInput(
                f"an account key for {lineage.server} was created meanwhile: try again"
            ) from None
    await state.save_account_url(url, key)


async def import_lineage(
    state: State, lineage: CertbotLineage, args: ImportArgs, *, ca_bundle: Path | None
) -> Path:
    """Store ``lineage`` in ``state`` (see the module docstring); return its ``--out``."""
    name = lineage.name
    keys = state.layout.certificate(name)
    if await state.storage.load(keys.record) is not None or await state.load_record(name):
        raise InvalidInput(
            f"certificate {name} already exists in {state.root}: `acmecerts delete {name}` "
            "first to import certbot's"
        )
    if args.account:
        await _import_account(state, lineage, args.directory)
    await state.save_ca_settings(ca_bundle)
    out = _out(state, args, name)
    record = CertificateRecord(
        name=name,
        identifiers=tuple(i.value for i in lineage.identifiers),
        out=str(out),
        out_layout=None if args.out_layout == "plain" else args.out_layout,
        key_type=lineage.key_type.value,
        webroot=lineage.webroot,
        pre_hook=lineage.pre_hook,
        post_hook=lineage.post_hook,
        deploy_hook=lineage.deploy_hook,
        challenge=StoredChallenge("http-01", http_01_listen=lineage.http_01_listen),
    )
    await import_certificate(
        state.storage, state.layout, record, lineage.chain, lineage.private_key_pem
    )
    return out


def run_import(args: ImportArgs, common: CommonArgs) -> int:
    """Run ``acmecerts import certbot``; return the exit code."""

    def work(report: Report) -> int:
        if args.out_layout not in OUT_LAYOUTS:
            raise InvalidInput(f"--out-layout must be plain or certbot, not {args.out_layout!r}")
        directory = args.directory.expanduser().absolute()
        root = (common.state_dir or default_state_dir()).expanduser().absolute()
        confs = renewal_confs(directory)
        lineages: list[CertbotLineage] = []
        failed: list[tuple[str, str]] = []
        for conf in confs:
            try:
                lineages.append(read_lineage(conf))
            except InvalidInput as exc:
                failed.append((conf.name.removesuffix(".conf"), str(exc)))
        imported: list[tuple[str, Path]] = []
        settings = dataclasses.replace(args, directory=directory)

        async def main() -> None:
            for lineage in lineages:
                state = State(root, lineage.server)
                try:
                    out = await import_lineage(state, lineage, settings, ca_bundle=common.ca_bundle)
                except AcmeCertsError as exc:
                    failed.append((lineage.name, str(exc)))
                else:
                    imported.append((lineage.name, out))
                finally:
                    await state.aclose()

        run_interruptible(main, json_mode=report.json_mode)
        code = ExitCode.FAILED if failed else ExitCode.OK
        if report.json_mode:
            report.json(
                {
                    "status": "failed" if failed else "ok",
                    "exit_code": int(code),
                    "imported": [{"name": n, "out": str(o)} for n, o in imported],
                    "failed": [{"name": n, "error": e} for n, e in failed],
                }
            )
            return code
        for name, out in imported:
            report.out.print(f"imported  {name} (renewals write {out})", markup=False)
        for name, error in failed:
            report.err.print(f"failed    {name}: {error}", markup=False)
        report.out.print(
            f"{len(imported)} imported, {len(failed)} failed from {directory}.", markup=False
        )
        return code

    return run_guarded(common, work)
