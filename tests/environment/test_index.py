"""The kernel's index settings as uv gets them: pip's semantics (the best version across every
index), credentials only in uv's environment (never its command line, never on disk in clear)
and masked as pip splits them. Against pypiserver on 127.0.0.1 (basic auth, a second index)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.fixtures import missing
from tests.infra.pypi_index import PypiIndex, make_wheel, pypiserver_available, start_index
from torchx_nb.environment.index import IndexSettings, mask_url, uv_message
from torchx_nb.environment.uv_install import HeadStart

USER, PASSWORD = "alice", "p@ss:w0rd@x"  # '@' in a password: pip splits at the last one


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PypiIndex, PypiIndex]]:
    """A private index behind basic auth with tnbx 2.0, and a second, open one with tnbx 1.0
    only (older versions on an extra index, as this machine's pip config has)."""
    reason = pypiserver_available()
    if reason:
        missing(reason)
    root = tmp_path_factory.mktemp("indexes")
    make_wheel(root / "private", "tnbx", "2.0")
    make_wheel(root / "open", "tnbx", "1.0")
    private = start_index(root / "private", USER, PASSWORD)
    open_ = start_index(root / "open")
    yield private, open_
    private.stop()
    open_.stop()


def test_masking_ends_the_credentials_at_the_last_at_before_the_host() -> None:
    assert mask_url("https://u:p@ss@host.example/simple") == "https://****@host.example/simple"
    assert mask_url("x https://tok@h/a@b y") == "x https://****@h/a@b y"
    assert uv_message("\x1b[1m\x1b[31merror\x1b[0m: http://a:b@c@h/s\n") == "error: http://****@h/s"


def test_uv_gets_the_indexes_credentials_and_tls_through_its_environment_only(
    indexes: tuple[PypiIndex, PypiIndex], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primary index needs the password and lists the newer version; the extra index,
    searched first by uv's default, lists only the older one: pip takes the best version
    across both, and so does the head start's uv, whose command line holds no credential."""
    private, open_ = indexes
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")  # the user's uv setting
    settings = IndexSettings(private.auth_url, (open_.url,))
    head = HeadStart(["tnbx==2.0"], "3.11", "x86_64-manylinux_2_17", settings)
    proc = head._proc
    assert proc is not None
    argv = " ".join(map(str, proc.args))  # type: ignore[arg-type]
    assert PASSWORD not in argv and "p%40ss" not in argv and "127.0.0.1" not in argv
    pack = head.take(["tnbx==2.0"], "3.11", "x86_64-manylinux_2_17", settings)
    assert pack is not None, "uv did not install tnbx 2.0 from the private index"
    pack.abort()


def test_pip_config_cache_keeps_no_credentials_and_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's reading of its configuration is kept for the next process in one file, the
    latest state only, and never when it holds credentials."""
    from torchx_nb.environment import pip_config

    data = tmp_path / "data"
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(data))
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    conf = tmp_path / "pip.conf"
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))

    def read(text: str) -> IndexSettings:
        conf.write_text(text)
        pip_config._pip_config.cache_clear()
        return pip_config.kernel_index(sys.executable)

    def on_disk() -> list[str]:
        return sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())

    secret = "t0ps3cret"
    got = read(f"[global]\nindex-url = https://bob:{secret}@idx.example/simple\n")
    assert got.index_url == f"https://bob:{secret}@idx.example/simple"
    assert not any(secret in p.read_text() for p in data.rglob("*") if p.is_file())
    for n in range(3):
        read(f"[global]\nindex-url = https://idx{n}.example/simple\ncert = /etc/ca.pem\n")
    assert on_disk() == ["pip-config.json"]
    (data / "pip-config.json").write_text('{"key": ')  # damaged: read again, written anew
    assert read("[global]\nindex-url = https://idx9.example/simple\n").index_url == (
        "https://idx9.example/simple"
    )
    assert "idx9" in (data / "pip-config.json").read_text()


def test_pip_tls_and_keyring_settings_reach_uv() -> None:
    settings = IndexSettings(
        "https://h/simple",
        cert="/etc/ca.pem",
        client_cert="/home/me/client.pem",
        trusted_hosts=("h", "g:8080"),
        keyring_provider="disabled",
    )
    env = settings.uv_env({"SSL_CERT_FILE": "/other", "UV_EXTRA_INDEX_URL": "https://x/s"})
    assert env["SSL_CERT_FILE"] == "/etc/ca.pem" and env["SSL_CLIENT_CERT"] == "/home/me/client.pem"
    assert env["UV_INSECURE_HOST"] == "h g:8080" and "UV_EXTRA_INDEX_URL" not in env
    assert "UV_KEYRING_PROVIDER" not in env and env["NO_COLOR"] == "1"


def test_netrc_credentials_reach_uv(
    indexes: tuple[PypiIndex, PypiIndex], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index URL without credentials, its password in a netrc file (as pip takes it)."""
    private, _ = indexes
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1\nlogin {USER}\npassword {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    settings = IndexSettings(private.url)
    from torchx_nb.environment.uv_install import uv_install_cmd

    proc = subprocess.run(
        uv_install_cmd(tmp_path / "t", ["tnbx==2.0"], "3.11", "x86_64-manylinux_2_17", settings),
        env={**settings.uv_env(), "UV_CACHE_DIR": str(tmp_path / "c")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "t" / "tnbx.py").read_text().startswith("VERSION = '2.0'")


def test_pips_cert_and_trusted_host_reach_uv_and_the_index_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index over TLS with a certificate no system bundle knows: uv (and the reading of
    the index's pages) trusts it with pip's ``cert`` or ``trusted-host``; without either,
    what the index said is that it is unreachable."""
    from tests.infra.pypi_index import make_ca
    from torchx_nb.environment.index_pages import listings
    from torchx_nb.environment.uv_install import uv_install_cmd

    reason = pypiserver_available()
    if reason:
        missing(reason)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    ca, cert, key = make_ca(tmp_path / "tls")
    make_wheel(tmp_path / "w", "tnbtls", "1.0")
    index = start_index(tmp_path / "w", tls=(cert, key))
    try:
        for n, settings in enumerate(
            [
                IndexSettings(index.url, cert=str(ca)),
                IndexSettings(index.url, trusted_hosts=("127.0.0.1",)),
                IndexSettings(index.url),
            ]
        ):
            proc = subprocess.run(
                uv_install_cmd(
                    tmp_path / f"t{n}", ["tnbtls==1.0"], "3.11", "x86_64-manylinux_2_17", settings
                ),
                env=settings.uv_env(),
                capture_output=True,
                text=True,
                check=False,
            )
            found = listings(settings, "tnbtls")
            if n < 2:
                assert proc.returncode == 0, proc.stderr
                assert [f.filename for f in found[0].files] == ["tnbtls-1.0-py3-none-any.whl"]
            else:
                assert proc.returncode != 0
                assert found[0].state == "unreachable" and found[0].detail == "SSLError", found
    finally:
        index.stop()
