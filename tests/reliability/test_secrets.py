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

from tests.infra.dockerd import DockerDaemon, Registry
from tests.workspace import secret_corpus
from torchx_nb.redact import MASK, redact, redact_text
from torchx_nb.workspace.collect import (
    SecretLeftOutWarning,
    SecretShippedWarning,
    collect_workspace,
)
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
        ("DB=postgres://bob:hunter2@db:5432/x", "DB=postgres://****@db:5432/x"),
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


# ---- the planted-credential corpus: secrets kept out by design, not by name -----------------


def leaks_in(blobs: list[bytes]) -> list[str]:
    """LEAK markers (and private key bodies) found in layer blobs, gzip'd or not."""
    found = []
    for blob in blobs:
        data = gzip.decompress(blob) if blob[:2] == b"\x1f\x8b" else blob
        for marker in (secret_corpus.LEAK.encode(), b"PRIVATE KEY", b"hunter2"):
            at = data.find(marker)
            if at >= 0:
                found.append(data[max(0, at - 80) : at + 40].decode(errors="replace"))
    return found


def image_layers(registry: Registry, image: str) -> list[bytes]:
    """The layer blobs of ``image`` (HOST/REPO:TAG) in ``registry``, in order."""
    import json
    import urllib.request

    repo, tag = image.split("/", 1)[1].rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repo}/manifests/{tag}",
        headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json,"
            " application/vnd.oci.image.manifest.v1+json"
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        manifest = json.load(answer)
    out = []
    for layer in manifest["layers"]:
        digest = layer["digest"].split(":", 1)[1]
        out.append(
            next(registry.root.rglob(f"blobs/sha256/{digest[:2]}/{digest}/data")).read_bytes()
        )
    return out


def registry_blobs(registry: Registry) -> list[bytes]:
    return [p.read_bytes() for p in registry.root.rglob("blobs/sha256/*/*/data")]


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "home"
    root.mkdir()
    return root, secret_corpus.plant(root)


def test_the_planted_corpus_ships_nothing_at_any_depth(
    corpus: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, planted = corpus
    ws = collect_workspace(root)
    assert {f.path for f in ws.files} == secret_corpus.shipped_expected()
    links = {f.path: f.link for f in ws.files if f.link}
    assert links == {f"{d}key-link": ".ssh/id_rsa" for d in secret_corpus.DEPTHS}
    left_out = dict(ws.secrets_left_out)
    visible = [p for p, group in planted.items() if group in ("visible", "hardlink")]
    # what no name rule catches is caught by its content, and said in one line each
    for path in visible:
        assert path in dict(ws.excluded), path
    for path in ("deploy_key", "proj/notes/backup.txt", "a/b/c/server_settings.py"):
        assert left_out[path].startswith("Private Key") or path.endswith(".py"), left_out
    assert left_out["a/b/c/server_settings.py"] == "credential assignment on line 1"
    assert left_out["notes/backup.txt"] == "Private Key on line 1"
    lines = ws.left_out_lines()
    assert (
        "deploy_key was left out of the workspace: it holds a Private Key on line 1; to ship it"
        " anyway, add the line '!deploy_key' to .torchxignore (or mark the line"
        " 'pragma: allowlist secret')"
    ) in lines
    assert all(len(line.splitlines()) == 1 for line in lines)
    layer = build_layer(ws, "workspace", cache=tmp_path / "layers")
    assert leaks_in([layer.path.read_bytes()]) == []


def test_the_scan_warns_once_per_file_in_one_line(corpus: tuple[Path, dict[str, str]]) -> None:
    from torchx_nb.schedulers.local_docker import create_scheduler

    root, _ = corpus
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        create_scheduler("torchx").preview_workspace(str(root))
    left = [str(w.message) for w in caught if w.category is SecretLeftOutWarning]
    assert left == collect_workspace(root).left_out_lines()
    assert "deploy_key was left out" in left[0] or any("deploy_key" in w for w in left)


def test_a_line_marked_allowlisted_or_reincluded_ships(tmp_path: Path) -> None:
    (tmp_path / "fixture.py").write_text(
        "TEST_KEY = '-----BEGIN RSA PRIVATE KEY-----'  # pragma: allowlist secret\n"
    )
    (tmp_path / "deploy_key").write_text(secret_corpus.PRIVATE_KEY)
    (tmp_path / "other_key").write_text(secret_corpus.PRIVATE_KEY)
    (tmp_path / ".torchxignore").write_text("!deploy_key\n")
    ws = collect_workspace(tmp_path)
    assert [f.path for f in ws.files] == ["deploy_key", "fixture.py"]
    assert ws.secret_warnings() == [
        "deploy_key holds a Private Key on line 1 and ships because .torchxignore re-includes"
        " it; remove the '!' line unless the job needs it"
    ]
    assert dict(ws.excluded)["other_key"] == "secret: Private Key on line 1"


def test_the_scan_is_cached_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchx_nb.workspace import scan

    for i in range(5):
        (tmp_path / f"m{i}.py").write_text(f"x = {i}  # the api key is read from the env\n")
    scanned: list[str] = []
    real = scan.scan_stream

    def spy(f: object, filename: str) -> object:
        scanned.append(filename)
        return real(f, filename)  # type: ignore[arg-type]

    monkeypatch.setattr(scan, "scan_stream", spy)
    collect_workspace(tmp_path)
    assert sorted(scanned) == [f"m{i}.py" for i in range(5)]
    scanned.clear()
    collect_workspace(tmp_path)
    assert scanned == [], "an unchanged workspace is not read again"
    (tmp_path / "m3.py").write_text("x = 33  # edited\n")
    (tmp_path / "m4.py").touch()  # new times, same content: hashed, not scanned
    os.utime(tmp_path / "m4.py", ns=(1, 1))
    collect_workspace(tmp_path)
    assert scanned == ["m3.py"]


def test_log_folders_of_ours_never_ship(tmp_path: Path) -> None:
    from tests.conftest import shell_app
    from torchx_nb.runner import get_runner

    ws_root = tmp_path / "ws"
    ws_root.mkdir()
    (ws_root / "main.py").write_text("print(1)\n")
    with get_runner() as runner:
        handle = runner.run(
            shell_app("echo HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456"),
            "local_cwd",
            {"log_dir": str(ws_root / "logs")},
            workspace=str(ws_root),
        )
        runner.wait(handle, wait_interval=0.1, timeout=30)
    ws = collect_workspace(ws_root)
    assert [f.path for f in ws.files] == ["main.py"]
    assert dict(ws.excluded)["logs/torchx/"] == "torchx_nb logs"


def test_registry_builder_pushes_no_planted_secret(
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    corpus: tuple[Path, dict[str, str]],
) -> None:
    from torchx_nb.workspace.builders import BuildInput, RegistryBuilder

    root, _ = corpus
    before = set(registry_blobs(registry))
    built = RegistryBuilder().build(
        BuildInput(
            python_in_registry,
            collect_workspace(root),
            {".torchx-cell-x.py": b"print(1)\n"},
            f"{registry.host}/corpus/registry",
            quiet=True,
        )
    )
    pushed = [b for b in registry_blobs(registry) if b not in before]
    assert built.uploaded_bytes > 0 and len(pushed) >= 3  # workspace, cell, config, manifest
    assert leaks_in(pushed) == []


def test_docker_builder_pushes_no_planted_secret(
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    registry: Registry,
    corpus: tuple[Path, dict[str, str]],
) -> None:
    """With a Dockerfile.torchx that copies the whole context: the context is the checked list."""
    from torchx_nb.workspace.builders import BuildInput, DockerBuilder

    root, _ = corpus
    (root / "Dockerfile.torchx").write_text("ARG IMAGE\nFROM $IMAGE\nWORKDIR /ws\nCOPY . .\n")
    before = set(registry_blobs(registry))
    built = DockerBuilder().build(
        BuildInput(
            base_images["python"],
            collect_workspace(root),
            {".torchx-cell-x.py": b"print(1)\n"},
            f"{registry.host}/corpus/docker",
            quiet=True,
        )
    )
    pushed = [b for b in registry_blobs(registry) if b not in before]
    assert built.image.startswith(f"{registry.host}/corpus/docker:") and pushed
    # the image's own layers, after the base's: when no earlier test of this worker had put
    # the base in this registry, its layers went up too, and the base's libcrypto holds the
    # text "ENCRYPTED PRIVATE KEY" (a false leak, seen once in CI)
    base_layers = len(
        docker_env.client().images.get(base_images["python"]).attrs["RootFS"]["Layers"]
    )
    ours = image_layers(registry, built.image)[base_layers:]
    assert ours and all(b in pushed for b in ours)
    assert leaks_in(ours) == []
    listing = docker_env.client().containers.run(
        built.image, ["sh", "-c", "cd /ws && find . | sort"], network_mode="host", remove=True
    )
    assert b"./train.py" in listing and b"deploy_key" not in listing and b".ssh" not in listing


def test_docker_builder_context_refuses_a_file_swapped_for_a_symlink(tmp_path: Path) -> None:
    from torchx_nb.workspace.layers import build_context

    ws_root = tmp_path / "ws"
    ws_root.mkdir()
    (ws_root / "Dockerfile.torchx").write_text("FROM x\n")
    (ws_root / "notes.txt").write_text("harmless")
    secret = tmp_path / "id_rsa"
    secret.write_text(SECRET)
    files = collect_workspace(ws_root)
    (ws_root / "notes.txt").unlink()
    (ws_root / "notes.txt").symlink_to(secret)
    with pytest.raises(Exception, match="changed while the workspace was packed"):
        build_context(files, {})


def test_a_cli_dry_run_names_every_reincluded_secret_on_a_cold_cache(tmp_path: Path) -> None:
    """The first scan (no cache yet) imports detect-secrets; its warnings are still printed,
    and the dry run's workspace section lists each re-included secret file."""
    from tests.conftest import cli

    ws = tmp_path / "ws"
    ws.mkdir()
    token = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
    (ws / ".env").write_text(f"GITHUB_TOKEN={token}\n")
    (ws / "id_ed25519").write_text("not really a key\n")
    (ws / ".torchxignore").write_text("!.env\n!id_ed25519\n")
    (ws / "main.py").write_text("print(1)\n")
    code, out, err = cli(
        "run",
        "--dryrun",
        "-s",
        "local_docker",
        "--workspace",
        str(ws),
        "utils.python",
        "--script",
        "main.py",
        env={"TORCHX_NB_DATA_DIR": str(tmp_path / "data")},
    )
    assert code == 0, err
    warned = [line for line in err.splitlines() if "re-includes it" in line]
    assert warned == [
        "torchx-nb: warning: .env looks like a secret (**/.env) and ships because"
        " .torchxignore re-includes it; remove the '!' line unless the job needs it",
        "torchx-nb: warning: id_ed25519 looks like a secret (**/id_ed25519*) and ships because"
        " .torchxignore re-includes it; remove the '!' line unless the job needs it",
        "torchx-nb: warning: .env holds a GitHub Token on line 1 and ships because"
        " .torchxignore re-includes it; remove the '!' line unless the job needs it",
    ], err
    section = out.split("secrets that ship because .torchxignore re-includes them:\n", 1)[1]
    assert section.splitlines()[:3] == [
        "  .env  [looks like a secret (**/.env)]",
        "  id_ed25519  [looks like a secret (**/id_ed25519*)]",
        "  .env  [holds a GitHub Token on line 1]",
    ]
    assert token not in out + err
