"""Secrets stay home: a home-like workspace with every kind of credential planted ships none of
them, in the file list, in an image layer, or in a request; masking catches token shapes."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import warnings
from pathlib import Path

import pytest

from torchx_nb.redact import MASK, redact, redact_text
from torchx_nb.workspace.collect import SecretShippedWarning, collect_workspace
from torchx_nb.workspace.layers import build_layer

SECRET = "tok-3f9a8b7c6d5e4f30"
# every credential kind a home folder holds (SageMaker Studio's workspace is the home folder)
PLANTED = [
    ".aws/credentials",
    ".ssh/id_ed25519",
    ".netrc",
    ".env",
    "proj/.env.local",
    ".docker/config.json",
    ".kube/config",
    ".config/gcloud/application_default_credentials.json",
    ".config/gh/hosts.yml",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".pgpass",
    ".s3cfg",
    ".boto",
    ".vault-token",
    ".git-credentials",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".ipython/profile_default/history.sqlite",
    ".local/share/jupyter/runtime/kernel-1234.json",
    ".local/share/jupyter/runtime/jpserver-99.json",
    ".jupyter/jupyter_server_config.json",
    ".local/share/keyrings/login.keyring",
    "certs/server.pem",
    ".git/config",
]
KEEP = ["train.py", "proj/model.py", "data/x.csv"]


def plant(home: Path) -> None:
    for rel in [*PLANTED, *KEEP]:
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"secret={SECRET}\n" if rel in PLANTED else "print('ok')\n")


def layer_members(layer_path: Path) -> dict[str, bytes]:
    with gzip.open(layer_path) as gz, tarfile.open(fileobj=io.BytesIO(gz.read())) as tar:
        return {
            m.name: (tar.extractfile(m).read() if m.isfile() else b"")  # type: ignore[union-attr]
            for m in tar.getmembers()
        }


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder that is also the workspace, with our data dir where Jupyter puts it."""
    home = tmp_path / "home"
    home.mkdir()
    plant(home)
    monkeypatch.setenv("HOME", str(home))
    data = home / ".local/share/jupyter/torchx_nb"
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(data))
    from torchx_nb.jobstore import JobStore

    JobStore()  # our own job store, inside the workspace
    (data / "local_cwd/torchx/app-1").mkdir(parents=True)
    (data / "local_cwd/torchx/app-1/request.json").write_text(f'{{"HF_TOKEN": "{SECRET}"}}')
    return home


def test_home_folder_workspace_ships_no_secret(home: Path) -> None:
    ws = collect_workspace(home)
    assert sorted(f.path for f in ws.files) == sorted(KEEP)
    layer = build_layer(ws, "workspace", cache=home.parent / "layers")
    members = layer_members(layer.path)
    assert not [n for n in members if any(n.endswith(p) for p in PLANTED)]
    assert not [n for n, data in members.items() if SECRET.encode() in data]
    assert all(not n.startswith("workspace/.local") for n in members)


def test_data_dir_moved_elsewhere_in_the_workspace_is_still_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws_root = tmp_path / "ws"
    (ws_root / "state").mkdir(parents=True)
    (ws_root / "state" / "jobs.sqlite").write_text("x")
    (ws_root / "main.py").write_text("x")
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(ws_root / "state"))
    assert [f.path for f in collect_workspace(ws_root).files] == ["main.py"]


def test_a_reincluded_secret_ships_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("A=1")
    (tmp_path / ".torchxignore").write_text("!.env\n")
    ws = collect_workspace(tmp_path)
    assert ".env" in [f.path for f in ws.files]
    assert ws.secret_warnings() == [
        ".env looks like a secret (**/.env) and ships because .torchxignore re-includes it;"
        " remove the '!' line unless the job needs it"
    ]

    from torchx_nb.schedulers.local_docker import create_scheduler

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        create_scheduler("torchx").preview_workspace(str(tmp_path))
    assert [str(w.message) for w in caught if w.category is SecretShippedWarning] == (
        ws.secret_warnings()
    )


def test_file_swapped_for_a_symlink_after_listing_is_refused(tmp_path: Path) -> None:
    ws_root = tmp_path / "ws"
    ws_root.mkdir()
    (ws_root / "notes.txt").write_text("harmless")
    secret = tmp_path / "id_rsa"
    secret.write_text(SECRET)
    files = collect_workspace(ws_root)
    (ws_root / "notes.txt").unlink()
    (ws_root / "notes.txt").symlink_to(secret)
    with pytest.raises(Exception, match="changed while the workspace was packed"):
        build_layer(files, "workspace", cache=tmp_path / "cache")


def test_folder_swapped_for_a_symlink_after_listing_is_refused(tmp_path: Path) -> None:
    ws_root = tmp_path / "ws"
    (ws_root / "sub").mkdir(parents=True)
    (ws_root / "sub" / "id").write_text("harmless")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id").write_text(SECRET)
    files = collect_workspace(ws_root)
    (ws_root / "sub" / "id").unlink()
    (ws_root / "sub").rmdir()
    (ws_root / "sub").symlink_to(outside)
    with pytest.raises(Exception, match="changed while the workspace was packed"):
        build_layer(files, "workspace", cache=tmp_path / "cache")


def test_same_size_edit_with_restored_mtime_rebuilds_the_layer(tmp_path: Path) -> None:
    ws_root = tmp_path / "ws"
    ws_root.mkdir()
    f = ws_root / "a.py"
    f.write_text("print(1)\n")
    first = build_layer(collect_workspace(ws_root), cache=tmp_path / "c")
    st = f.stat()
    time.sleep(0.01)
    f.write_text("print(2)\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = build_layer(collect_workspace(ws_root), cache=tmp_path / "c")
    assert second.digest != first.digest
    assert layer_members(second.path)["workspace/a.py"] == b"print(2)\n"


@pytest.mark.parametrize(
    "text, shown",
    [
        ("MY_VAR=hf_" + "a1B2" * 10, "MY_VAR=" + MASK),
        ("X=github_pat_11ABCDEFG0_" + "x" * 40, "X=" + MASK),
        (
            "curl -H 'Authorization: Bearer abcdef0123456789'",
            "curl -H 'Authorization: Bearer ****'",
        ),
        ("Authorization: token abcdef0123456789", "Authorization: token ****"),
        ("DB=postgres://bob:hunter2@db:5432/x", "DB=postgres://bob:****@db:5432/x"),
        ("AUTHOR=bob TEAM=ml", "AUTHOR=bob TEAM=ml"),
        ("plain text with no secret", "plain text with no secret"),
    ],
)
def test_masking_catches_token_shapes(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_tag_keys_are_not_masked_but_secret_tag_values_are() -> None:
    tags = [{"Key": "team", "Value": "ml"}, {"Key": "api_token", "Value": "x"}]
    assert redact({"Tags": tags}) == {
        "Tags": [{"Key": "team", "Value": "ml"}, {"Key": "api_token", "Value": MASK}]
    }


def test_masking_a_huge_token_is_linear() -> None:
    # 20,000 characters used to take 3-6 s (the key pattern was retried at every offset), so
    # 200,000 would outlast the test timeout; the speed itself is measured in benchmarks/
    text = "x" * 200_000
    assert redact_text(text) == text
    assert redact_text("K=" + text) == "K=" + text
