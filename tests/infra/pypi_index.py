"""A package index on 127.0.0.1: pypiserver serving a folder of wheels (its simple pages carry
each file's sha256), optionally behind basic auth (for listings and downloads alike), for the
environment layer's index tests. Each index is its own process, stopped by ``stop``."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra.dockerd import free_port

_SERVE = """
import os, socketserver, sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
import pypiserver
root, port, user = sys.argv[1], int(sys.argv[2]), sys.argv[3]
password = os.environ.pop("TNB_INDEX_PASSWORD", "")
auth = {}
if user:
    auth = dict(
        authenticate=["download", "list"],
        password_file=None,
        auther=lambda u, p: (u, p) == (user, password),
    )
app = pypiserver.app(root=[root], **auth)
class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass
server = make_server("127.0.0.1", port, app, server_class=Server, handler_class=Quiet)
if os.environ.get("TNB_INDEX_CERT"):
    import ssl
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(os.environ["TNB_INDEX_CERT"], os.environ["TNB_INDEX_KEY"])
    server.socket = tls.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


def pypiserver_available() -> str | None:
    import importlib.util

    if importlib.util.find_spec("pypiserver") is None:
        return "pypiserver is not installed (pip install -e '.[test]')"
    return None


@dataclass
class PypiIndex:
    folder: Path
    port: int
    user: str
    password: str
    proc: subprocess.Popen[bytes]
    scheme: str = "http"

    @property
    def url(self) -> str:
        """The simple index's URL, without credentials."""
        return f"{self.scheme}://127.0.0.1:{self.port}/simple"

    def url_with(self, user: str, password: str) -> str:
        from urllib.parse import quote

        return (
            f"http://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{self.port}/simple"
        )

    @property
    def auth_url(self) -> str:
        """The URL with this index's credentials (percent-encoded, as pip takes them)."""
        return self.url_with(self.user, self.password)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def start_index(
    folder: Path, user: str = "", password: str = "", tls: tuple[Path, Path] | None = None
) -> PypiIndex:
    """pypiserver serving ``folder`` (basic auth when ``user`` is given; over TLS with
    ``tls``, a certificate and its key)."""
    port = free_port()
    env = {**os.environ, "TNB_INDEX_PASSWORD": password}  # not on its command line
    if tls is not None:
        env.update(TNB_INDEX_CERT=str(tls[0]), TNB_INDEX_KEY=str(tls[1]))
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(folder), str(port), user],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    index = PypiIndex(folder, port, user, password, proc, "https" if tls else "http")
    import ssl

    unchecked = ssl.create_default_context()
    unchecked.check_hostname = False
    unchecked.verify_mode = ssl.CERT_NONE
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{index.url}/", timeout=1, context=unchecked).close()
            return index
        except urllib.error.HTTPError:
            return index  # it answers (401 when it asks for credentials)
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    index.stop()
    raise RuntimeError("pypiserver did not start")


def make_wheel(
    out: Path, name: str, version: str, tag: str = "py3-none-any", body: str | None = None
) -> Path:
    """A one-module wheel ``name`` ``version`` (``VERSION`` and ``BODY`` in it) tagged ``tag``."""
    out.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    path = out / f"{name}-{version}-{tag}.whl"
    pure = "true" if tag.endswith("-none-any") else "false"
    files = {
        f"{name}.py": f"VERSION = {version!r}\nBODY = {body!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {pure}\nTag: {tag}\n"
        ),
        f"{info}/top_level.txt": f"{name}\n",
    }
    record = []
    for rel, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{rel},sha256={b64},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(path, "w") as zf:
        for rel, text in files.items():
            zf.writestr(rel, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def make_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A CA of the test's own (no system bundle knows it) and a certificate it signed for
    127.0.0.1: (the CA bundle, the certificate, its key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def make(subject: str, issuer: x509.Name | None, signer: Any, ca: bool) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        return builder.sign(signer or key, hashes.SHA256()), key

    ca, ca_key = make("torchx-nb test CA", None, None, True)
    leaf, leaf_key = make("127.0.0.1", ca.subject, ca_key, False)
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths
