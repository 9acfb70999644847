"""The benchmarks' peer virtualenv (benchmarks/peer.py): a first run installs the extras its
benchmark asks for, as a later run does (bench_aws_list needs boto3 in TorchX's venv)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


class FakeEnvBuilder:
    """venv.EnvBuilder's stand-in: a virtualenv folder with its ``bin`` only, made at once."""

    def __init__(self, **_: object) -> None: ...

    def create(self, root: Path) -> None:
        (Path(root) / "bin").mkdir(parents=True)


def test_a_new_peer_virtualenv_gets_its_extras(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import peer

    installed: list[str] = []

    def pip(root: Path, requirement: str) -> None:
        installed.append(requirement)
        if requirement.startswith("torchx=="):
            (root / "bin" / "torchx").write_text("")

    monkeypatch.setenv("TORCHX_NB_BENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(peer.venv, "EnvBuilder", FakeEnvBuilder)
    monkeypatch.setattr(peer, "_pip", pip)
    exe = peer.ensure_torchx_venv(("boto3",))
    assert installed == [f"torchx=={peer.TORCHX_VERSION}", "boto3"]
    assert exe == tmp_path / f"torchx-{peer.TORCHX_VERSION}" / "bin" / "torchx"
    peer.ensure_torchx_venv(("boto3",))
    assert installed == [f"torchx=={peer.TORCHX_VERSION}", "boto3"]  # cached: nothing again
    sys.modules.pop("peer", None)


def test_our_virtualenv_is_made_once_and_runs_this_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_cli runs our CLI from a virtualenv made as the peer's: the core dependencies
    installed once, this checkout on its path, a ``torchx-nb`` script calling our CLI as the
    console script pyproject.toml names does."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import peer

    installed: list[str] = []

    monkeypatch.setenv("TORCHX_NB_BENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(peer.venv, "EnvBuilder", FakeEnvBuilder)
    monkeypatch.setattr(peer, "_pip", lambda root, requirement: installed.append(requirement))
    exe = peer.ensure_our_venv(ROOT)
    assert "google-re2>=1.1" in installed and "uv>=0.5" in installed
    count = len(installed)
    assert peer.ensure_our_venv(ROOT) == exe and len(installed) == count  # made once
    script = exe.read_text()
    assert (
        script.startswith(f"#!{exe.parent / 'python'}\n")
        and "from torchx_nb.cli import command\nsys.exit(command())" in script  # pyproject's
    )
    pth = list(exe.parent.parent.glob("lib/python*/site-packages/torchx_nb_checkout.pth"))
    assert len(pth) == 1 and pth[0].read_text() == f"{ROOT}\n"
