"""The test control plane's credentials: a CA, the apiserver's serving certificate, an admin
client certificate (``system:masters``), the service-account key pair, and the kubeconfig
that uses them (context `CONTEXT`). Signed with ``cryptography``, valid for 30 days.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

CONTEXT = "servectl-test"
"""The kubeconfig's context, cluster and user name."""


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class Pki:
    """Where the PEM files are."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def write_pki(directory: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """A CA, the apiserver's serving cert (for 127.0.0.1, 10.0.0.1 and ``extra_ips``), an
    admin client cert (system:masters) and the service-account RSA key pair, all PEM files
    in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("servectl-test-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    dns.append("kubernetes.default.svc.cluster.local")
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    sans += [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "10.0.0.1", *extra_ips)
    ]
    serving, serving_key = leaf(
        _name("kube-apiserver"), x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, sans
    )
    admin, admin_key = leaf(
        _name("servectl-test-admin", "system:masters"),
        x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    pki.ca_cert.write_bytes(_pem_cert(ca))
    pki.serving_cert.write_bytes(_pem_cert(serving))
    pki.admin_cert.write_bytes(_pem_cert(admin))
    for path, key in (
        (pki.ca_key, ca_key),
        (pki.serving_key, serving_key),
        (pki.admin_key, admin_key),
        (pki.sa_key, sa_key),
    ):
        path.write_bytes(_pem_key(key))
        path.chmod(0o600)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def issue_client(pki: Pki, directory: Path, user: str, group: str) -> tuple[Path, Path]:
    """A client certificate for ``user`` in ``group`` signed by the CA (a kubelet's:
    ``system:node:<name>`` in ``system:nodes``), written as ``directory/<user>.crt`` and
    ``.key``; returns their paths."""
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key}: not the EC key write_pki writes")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(user, group))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    stem = user.replace(":", "-")
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(_pem_cert(cert))
    key_path.write_bytes(_pem_key(key))
    key_path.chmod(0o600)
    return cert_path, key_path


def write_kubeconfig(
    path: Path, server: str, pki: Pki, client: tuple[Path, Path] | None = None
) -> None:
    """A kubeconfig for ``server`` with the admin client certificate, or ``client``'s
    (certificate, key) (mode 600)."""
    cert, key = client or (pki.admin_cert, pki.admin_key)

    def b64(file: Path) -> str:
        return base64.b64encode(file.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": CONTEXT,
                "user": {
                    "client-certificate-data": b64(cert),
                    "client-key-data": b64(key),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
        "current-context": CONTEXT,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
