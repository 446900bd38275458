"""Throwaway certificates for tests, made with ``openssl``: a CA, server certificates for
127.0.0.1 and client certificates, each signed by the CA it is given."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Pair:
    """A PEM certificate and its private key."""

    cert: Path
    key: Path


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str = "ca") -> Pair:
    """A self-signed CA, ``folder/<name>.pem`` and ``.key``, valid two days."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = Pair(folder / f"{name}.pem", folder / f"{name}.key")
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-keyout", ca.key, "-out", ca.cert, "-subj", f"/CN={name}"),
    )
    return ca


def make_cert(folder: Path, ca: Pair, name: str, *, client: bool = False) -> Pair:
    """A certificate signed by ``ca``: for a server at IP 127.0.0.1, or (``client``) for TLS
    client authentication with common name ``name``."""
    pair = Pair(folder / f"{name}.pem", folder / f"{name}.key")
    csr, ext = folder / f"{name}.csr", folder / f"{name}.ext"
    usage = "clientAuth" if client else "serverAuth"
    ext.write_text(
        ("" if client else "subjectAltName=IP:127.0.0.1\n")
        + "basicConstraints=critical,CA:FALSE\n"
        + "keyUsage=critical,digitalSignature,keyEncipherment\n"
        + f"extendedKeyUsage={usage}\n"
        + "authorityKeyIdentifier=keyid,issuer\n"
        + "subjectKeyIdentifier=hash\n"
    )
    subject = f"/CN={name}" if client else "/CN=127.0.0.1"
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", pair.key, "-out", csr, "-subj", subject
    )
    _openssl(
        *("x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial"),
        *("-extfile", ext, "-days", "2", "-out", pair.cert),
    )
    return pair


def make_certs(folder: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a CA and a server certificate for IP 127.0.0.1."""
    ca = make_ca(folder)
    server = make_cert(folder, ca, "server")
    return ca.cert, server.cert, server.key


def client_context(ca: Path, pair: Pair | None = None) -> ssl.SSLContext:
    """A client's TLS context trusting ``ca``, presenting ``pair`` when given (httpx 0.28 drops
    a ``cert=`` given beside ``verify=PATH``: pass the context as ``verify``)."""
    context = ssl.create_default_context(cafile=str(ca))
    if pair is not None:
        context.load_cert_chain(str(pair.cert), str(pair.key))
    return context
