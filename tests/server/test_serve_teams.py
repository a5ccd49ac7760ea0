"""``phasegraph tokens`` and ``phasegraph serve --tokens --tls-cert`` as real processes.

The token file is managed with the CLI while a server over HTTPS (a self-signed
certificate made here) reads it: a revoked token is refused with no restart.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import os
import ssl
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from builders import cli_argv, serve_command
from phasegraph.server._tokens import TokenBook, edit_book


def phasegraph(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, timeout=60, env=env, check=False
    )


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=365 * 30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert, private = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert, private


def test_tokens_add_list_revoke(tmp_path: Path) -> None:
    file = str(tmp_path / "tokens.json")
    added = phasegraph(
        "tokens",
        "add",
        "ci",
        "--scope",
        "runs:read",
        "--group",
        "bots",
        "--expires",
        "30d",
        "--file",
        file,
    )
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    assert secret.startswith("pgt_")
    assert "shown this once" in added.stderr
    stored = Path(file).read_text()
    assert secret not in stored
    assert oct(Path(file).stat().st_mode & 0o777) == "0o600"
    listed = phasegraph("tokens", "list", "--json", "--file", file)
    rows = json.loads(listed.stdout)
    assert [(r["name"], r["scopes"], r["groups"], r["expired"]) for r in rows] == [
        ("ci", ["runs:read"], ["bots"], False)
    ]
    assert secret not in listed.stdout
    taken = phasegraph("tokens", "add", "ci", "--scope", "runs:read", "--file", file)
    assert (taken.returncode, "exists" in taken.stderr) == (2, True)
    unknown = phasegraph("tokens", "add", "x", "--scope", "runs:everything", "--file", file)
    assert unknown.returncode == 2
    assert "unknown scope" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    revoked = phasegraph("tokens", "revoke", "ci", "--file", file)
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(phasegraph("tokens", "list", "--json", "--file", file).stdout) == []
    missing = phasegraph("tokens", "revoke", "ci", "--file", file)
    assert missing.returncode == 2
    assert "no token named" in missing.stderr


@pytest.fixture
async def https_server(tmp_path: Path) -> AsyncIterator[tuple[str, Path, ssl.SSLContext]]:
    cert, key = self_signed(tmp_path)
    tokens = tmp_path / "tokens.json"
    env = {k: v for k, v in os.environ.items() if k != "PHASEGRAPH_TOKEN"}
    options = ("--store", "memory://", "--port", "0", "--tokens", str(tokens))
    tls = ("--tls-cert", str(cert), "--tls-key", str(key), "-q")
    async with serve_command(*options, *tls, cwd=tmp_path, env=env) as (_, address):
        assert address.startswith("https://"), address
        yield address, tokens, ssl.create_default_context(cafile=str(cert))


async def test_https_server_reads_the_token_file_the_cli_changes(
    https_server: tuple[str, Path, ssl.SSLContext],
) -> None:
    url, tokens, trust = https_server
    file = str(tokens)
    added = await asyncio.to_thread(
        phasegraph, "tokens", "add", "dev", "--scope", "runs:read", "--file", file
    )
    secret = added.stdout.strip()
    auth = {"Authorization": f"Bearer {secret}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/whoami", headers=auth, ssl=trust) as answer:
            assert answer.status == 200
            assert (await answer.json())["name"] == "dev"
        async with session.post(
            f"{url}/runs", json={"graph": "hello"}, headers=auth, ssl=trust
        ) as refused:
            assert refused.status == 403
            assert (await refused.json())["missing_scope"] == "runs:start"
        await asyncio.to_thread(phasegraph, "tokens", "revoke", "dev", "--file", file)
        async with session.get(f"{url}/whoami", headers=auth, ssl=trust) as gone:
            assert gone.status == 401
        with pytest.raises(aiohttp.ClientError):  # plain HTTP to a TLS port gets no answer
            async with session.get(url.replace("https", "http") + "/healthz") as plain:
                assert plain.status != 200


def test_serve_refuses_half_configured_sign_in(tmp_path: Path) -> None:
    jwt_only = phasegraph("serve", "--store", "memory://", "--jwt-issuer", "https://id.example")
    assert jwt_only.returncode == 2
    assert "--jwt-audience" in jwt_only.stderr
    tls_only = phasegraph("serve", "--store", "memory://", "--tls-cert", str(tmp_path / "c"))
    assert tls_only.returncode == 2
    assert "--tls-key" in tls_only.stderr
    broken = tmp_path / "tokens.json"
    broken.write_text("{not json")
    bad_file = phasegraph("serve", "--store", "memory://", "--port", "0", "--tokens", str(broken))
    assert bad_file.returncode == 2
    assert "tokens.json:1" in bad_file.stderr
    assert "Traceback" not in bad_file.stderr


def test_an_edit_of_the_token_file_waits_for_the_one_in_progress(tmp_path: Path) -> None:
    """Two edits at once both land: the second reads the book the first wrote.

    The first edit is held inside its change while the second starts; the second can only
    finish after the first has written, so neither token is lost. (Without the lock the
    second reads the book before the first writes, and the first's write drops its token.)
    """
    tokens = tmp_path / "tokens.json"
    inside, release = threading.Event(), threading.Event()

    def first(book: TokenBook) -> tuple[TokenBook, str]:
        inside.set()
        release.wait(timeout=30)
        return book.add("alice", ("runs:read",), (), now=0.0)

    held = threading.Thread(target=edit_book, args=(tokens, first))
    held.start()
    assert inside.wait(timeout=30)
    second = threading.Thread(
        target=edit_book, args=(tokens, lambda book: book.add("bob", ("runs:read",), (), now=0.0))
    )
    second.start()
    second.join(timeout=1.0)  # paces the test only: with the lock, bob is still waiting
    release.set()
    held.join()
    second.join()
    listed = phasegraph("tokens", "list", "--file", str(tokens), "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(entry["name"] for entry in json.loads(listed.stdout)) == ["alice", "bob"]
