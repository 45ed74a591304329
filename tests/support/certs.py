"""Certificates for TLS tests, made with ``cryptography`` (no openssl CLI, no network).

:func:`make_certs` writes into a directory, as PEM files:

- a private CA (``ca``) that no system trusts;
- a server certificate and key signed by it, naming ``127.0.0.1`` and ``localhost``;
- a client certificate and key signed by it (for ``tls-auth-clients yes``);
- a second CA (``stranger_ca``) and a server certificate signed by that one: a server
  the client cannot verify with ``ca`` (verification off, or a wrong CA).

Keys are P-256 (fast to make); certificates are valid from an hour ago for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server: Pair
    client: Pair
    stranger_ca: Path
    #: A server certificate signed by ``stranger_ca`` (for 127.0.0.1 too).
    stranger: Pair


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _ca(common: str, path: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _leaf(
    common: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    usage: x509.ObjectIdentifier,
    cert_path: Path,
    key_path: Path,
) -> Pair:
    ca_cert, ca_key = issuer
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return Pair(cert_path, key_path)


def make_certs(directory: Path) -> Certs:
    """Write the certificates of the module docstring into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("gateway test CA", directory / "ca.pem")
    stranger = _ca("a CA nobody trusts", directory / "stranger-ca.pem")
    server_auth, client_auth = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    return Certs(
        ca=directory / "ca.pem",
        server=_leaf("redis", ca, server_auth, directory / "server.pem", directory / "server.key"),
        client=_leaf(
            "gateway", ca, client_auth, directory / "client.pem", directory / "client.key"
        ),
        stranger_ca=directory / "stranger-ca.pem",
        stranger=_leaf(
            "redis", stranger, server_auth, directory / "stranger.pem", directory / "stranger.key"
        ),
    )
