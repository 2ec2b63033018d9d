"""What certbot and lego users reach for, against real Pebble 2.10: ``renew --cert-name``,
``issue --reuse-key``, ``--dry-run`` and ``issue --csr``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import (
    ca_args,
    check_certificate,
    clean_environment,
    http01_args,
    one_json,
    run_cli,
    run_main,
    serial_of,
)
from cryptography import x509
from cryptography.hazmat.primitives import serialization

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # Pebble is trusted by --ca-bundle only


def test_renew_cert_name_renews_only_the_named_certificates(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    common = [*ca_args(pebble, state), *http01_args(pebble)]
    names = [
        "one.certname.example.test",
        "two.certname.example.test",
        "three.certname.example.test",
    ]
    for name in names:
        issued = run_main(capsys, "issue", name, "--profile", "classic", *common)
        assert issued.returncode == 0, issued.stderr
    out = state / "certificates"
    serials = {name: serial_of(out / name) for name in names}

    renewed = run_main(
        capsys,
        "renew",
        "--force",
        "--json",
        "--cert-name",
        names[0],
        "--cert-name",
        names[2],
        *common,
    )
    assert renewed.returncode == 0, renewed.stderr
    statuses = {c["name"]: c["status"] for c in one_json(renewed)["certificates"]}
    assert statuses == {names[0]: "renewed", names[2]: "renewed"}
    assert serial_of(out / names[0]) != serials[names[0]]
    assert serial_of(out / names[1]) == serials[names[1]]
    assert serial_of(out / names[2]) != serials[names[2]]

    # An unknown name: exit 2 naming it, nothing sent (not even for the known one).
    seen = len(pebble.requests_seen())
    unknown = run_cli(
        "renew",
        "--force",
        "--cert-name",
        names[1],
        "--cert-name",
        "nope.certname.example.test",
        *common,
    )
    assert unknown.returncode == 2, unknown.stderr
    assert unknown.stderr.startswith(
        "acmecerts: error: no certificate named nope.certname.example.test"
    )
    assert len(unknown.stderr.splitlines()) == 1
    assert len(pebble.requests_seen()) == seen
    assert serial_of(out / names[1]) == serials[names[1]]


def _public_key(out: Path) -> bytes:
    (leaf,) = x509.load_pem_x509_certificates((out / "cert.pem").read_bytes())
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return leaf.public_key().public_bytes(*spki)


def test_reuse_key_keeps_the_private_key_across_renewals(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    common = [*ca_args(pebble, state), *http01_args(pebble)]
    kept, fresh = "kept.reusekey.example.test", "fresh.reusekey.example.test"
    for name, extra in ((kept, ["--reuse-key"]), (fresh, [])):
        issued = run_main(capsys, "issue", name, "--profile", "classic", *extra, *common)
        assert issued.returncode == 0, issued.stderr
    out = state / "certificates"
    before = {name: (serial_of(out / name), _public_key(out / name)) for name in (kept, fresh)}

    for _ in range(2):  # renew stored the setting: it holds on every renewal
        renewed = run_main(capsys, "renew", "--force", "--json", *common)
        assert renewed.returncode == 0, renewed.stderr
        statuses = {c["name"]: c["status"] for c in one_json(renewed)["certificates"]}
        assert statuses == {kept: "renewed", fresh: "renewed"}
        assert serial_of(out / kept) != before[kept][0]
        assert _public_key(out / kept) == before[kept][1]
        assert serial_of(out / fresh) != before[fresh][0]
        assert _public_key(out / fresh) != before[fresh][1]
        before[fresh] = (serial_of(out / fresh), _public_key(out / fresh))
        before[kept] = (serial_of(out / kept), before[kept][1])
        check_certificate(out / kept, {kept}, pebble.root_pem())

    # issue again without --reuse-key: the setting is dropped, the next key is new
    again = run_main(capsys, "issue", kept, "--force", "--profile", "classic", *common)
    assert again.returncode == 0, again.stderr
    assert _public_key(out / kept) != before[kept][1]


def _tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``root``: its mode, size and content (directories: mode only)."""
    found: dict[str, tuple[int, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(root))] = (info.st_mode, info.st_size, content)
    return found


FINALIZE = ("POST", "/finalize-order/")


def test_issue_dry_run_issues_at_the_ca_and_keeps_nothing(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    common = [*ca_args(pebble, state), *http01_args(pebble)]
    name = "dry.issue.example.test"
    first = run_main(capsys, "issue", name, "--out", str(out), *common)
    assert first.returncode == 0, first.stderr
    before = (_tree(state), _tree(out))
    hook_log = tmp_path / "hooks.log"
    deploy = f"echo deploy >> {hook_log}"

    seen = len(pebble.requests_seen())
    dry = run_cli(
        "issue",
        name,
        "--dry-run",
        "--json",
        "--out",
        str(out),
        "--deploy-hook",
        deploy,
        "--pre-hook",
        f"echo pre >> {hook_log}",
        *common,
    )
    assert dry.returncode == 0, dry.stderr
    assert f"dry run at {pebble.directory_url} itself" in dry.stderr
    assert "nothing is saved or exported" in dry.stderr
    (certificate,) = one_json(dry)["certificates"]
    assert certificate["status"] in ("issued", "renewed")
    requests = pebble.requests_seen()[seen:]
    assert FINALIZE in requests  # the whole issuance, even though a current one is stored
    assert ("POST", "/sign-me-up") not in requests  # the stored account, not a new one
    assert (_tree(state), _tree(out)) == before
    assert hook_log.read_text() == "pre\n"  # the pre-hook ran, the deploy-hook did not

    # without --dry-run the same command writes both (the comparison can fail)
    real = run_main(capsys, "issue", name, "--force", "--out", str(out), *common)
    assert real.returncode == 0, real.stderr
    assert (_tree(state), _tree(out)) != before


def test_a_dry_run_for_lets_encrypt_production_goes_to_its_staging_directory() -> None:
    from acmecerts.cli._dryrun import dry_run_directory
    from acmecerts.cli._firstcontact import LETS_ENCRYPT_PRODUCTION, LETS_ENCRYPT_STAGING

    for url in (LETS_ENCRYPT_PRODUCTION, LETS_ENCRYPT_PRODUCTION + "/"):
        directory, note = dry_run_directory(url)
        assert directory == LETS_ENCRYPT_STAGING
        assert LETS_ENCRYPT_STAGING in note
    other = "https://ca.example.test/directory"
    assert dry_run_directory(other)[0] == other
    assert dry_run_directory(LETS_ENCRYPT_STAGING)[0] == LETS_ENCRYPT_STAGING
