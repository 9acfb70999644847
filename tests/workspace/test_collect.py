from __future__ import annotations

from pathlib import Path

import pytest

from torchx_nb.workspace.collect import WorkspaceError, collect_workspace

SECRETS = [
    ".aws/credentials",
    ".env",
    ".env.local",
    "conf/.env",
    "keys/id_rsa",
    "keys/id_ed25519.pub",
    "tls/server.pem",
    "tls/server.key",
    ".ssh/config",
    ".docker/config.json",
    ".netrc",
    "gcp/credentials.json",
]
CLUTTER = [
    ".git/config",
    ".ipynb_checkpoints/a-checkpoint.ipynb",
    "pkg/__pycache__/m.pyc",
    "node_modules/x/index.js",
    ".venv/bin/python",
]


def plant(root: Path, paths: list[str], text: str = "x") -> None:
    for p in paths:
        f = root / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)


def test_secrets_and_clutter_never_ship(tmp_path: Path) -> None:
    plant(tmp_path, [*SECRETS, *CLUTTER, "train.py", "data/a.csv", "pkg/m.py"])
    ws = collect_workspace(tmp_path)
    assert [f.path for f in ws.files] == ["data/a.csv", "pkg/m.py", "train.py"]
    reasons = dict(ws.excluded)
    assert reasons[".aws/"] == "secret" and reasons[".env"] == "secret"
    assert reasons["conf/.env"] == "secret" and reasons[".git/"] == "secret"
    assert reasons[".ipynb_checkpoints/"] == "hidden" and reasons[".venv/"] == "hidden"
    assert reasons["keys/id_rsa"] == "secret" and reasons["tls/server.pem"] == "secret"
    assert reasons["node_modules/"] == "clutter"
    text = ws.preview()
    assert "3 files" in text and "[secret]" in text and "[hidden]" in text and "train.py" in text


def test_ignore_file_rules_and_explicit_reinclusion(tmp_path: Path) -> None:
    plant(tmp_path, [".env", "big/model.bin", "big/readme.txt", "notes.md", "train.py"])
    (tmp_path / ".torchxignore").write_text("big\n!big/readme.txt\n*.md\n!.env\n")
    (tmp_path / ".dockerignore").write_text("train.py\n")
    ws = collect_workspace(tmp_path)
    assert ws.ignore_file == ".torchxignore"
    assert [f.path for f in ws.files] == [".env", "big/readme.txt", "train.py"]
    assert dict(ws.excluded)["big/model.bin"] == ".torchxignore: big"
    assert dict(ws.excluded)[".torchxignore"] == "hidden"


def test_dockerfile_is_never_ignored_and_symlinks_stay_links(tmp_path: Path) -> None:
    plant(tmp_path, ["Dockerfile.torchx", "real.txt"])
    (tmp_path / "link.txt").symlink_to("real.txt")
    (tmp_path / ".dockerignore").write_text("Dockerfile.torchx\n")
    ws = collect_workspace(tmp_path)
    paths = {f.path: f for f in ws.files}
    assert "Dockerfile.torchx" in paths and paths["link.txt"].link == "real.txt"


def test_size_limit_names_the_biggest_files(tmp_path: Path) -> None:
    plant(tmp_path, ["small.txt"])
    (tmp_path / "huge.bin").write_bytes(b"0" * 5000)
    with pytest.raises(WorkspaceError, match=r"over the .* limit; biggest: huge.bin"):
        collect_workspace(tmp_path, max_bytes=1000)
    with pytest.raises(WorkspaceError, match="is not a folder"):
        collect_workspace(tmp_path / "missing")


def test_fingerprint_changes_with_content(tmp_path: Path) -> None:
    plant(tmp_path, ["a.py"])
    before = collect_workspace(tmp_path).fingerprint()
    assert collect_workspace(tmp_path).fingerprint() == before
    (tmp_path / "a.py").write_text("changed!")
    assert collect_workspace(tmp_path).fingerprint() != before


def test_python_environments_stay_out_and_are_named(tmp_path: Path) -> None:
    """A virtualenv (``pyvenv.cfg``) or a conda environment (``conda-meta/``) in the
    workspace, hidden or not, never ships as files: it is listed as an environment. A folder
    that merely looks like one (a ``venv`` without ``pyvenv.cfg``) ships; an ignore file's
    ``!`` line can still ship an environment's files on purpose."""
    plant(
        tmp_path,
        [
            "venv/pyvenv.cfg",
            "venv/lib/python3.11/site-packages/big.py",
            "tools/.venv/pyvenv.cfg",
            "envs/cuda/conda-meta/history",
            "envs/cuda/lib/libcuda.so",
            "venvish/notes.txt",
            "train.py",
        ],
    )
    ws = collect_workspace(tmp_path)
    assert [f.path for f in ws.files] == ["train.py", "venvish/notes.txt"]
    assert sorted(ws.environments) == ["envs/cuda/", "tools/.venv/", "venv/"]
    reasons = dict(ws.excluded)
    assert reasons["venv/"] == "environment: a virtualenv (pyvenv.cfg)"
    assert reasons["tools/.venv/"] == "environment: a virtualenv (pyvenv.cfg)"
    assert reasons["envs/cuda/"] == "environment: a conda environment (conda-meta/)"
    assert "  venv/  [environment: a virtualenv (pyvenv.cfg)]" in ws.preview()
    (tmp_path / ".torchxignore").write_text("!venv/lib/\n")
    again = collect_workspace(tmp_path)
    assert "venv/lib/python3.11/site-packages/big.py" in [f.path for f in again.files]
