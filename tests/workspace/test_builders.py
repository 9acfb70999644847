"""A notebook cell and its folder, patched onto an image each way, run by a real dockerd."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.dockerd import DockerDaemon, Registry
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner
from torchx_nb.specs import AppState, TorchxNbError

CELL = "import os\nprint('cell ran in', os.getcwd(), open('data.csv').read().strip())\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "notebook-folder"
    d.mkdir()
    (d / "data.csv").write_text("x,y")
    (d / ".env").write_text("TOKEN=do-not-ship")
    return d


def run_cell(source: str, image: str, ws: Path, **cfg: object) -> tuple[str, str, AppState]:
    with get_runner() as runner:
        handle = runner.run(
            cell(source=source, image=image),
            "local_docker",
            {"network": "host", "quiet": True, **cfg},
            workspace=str(ws),
        )
        status = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert status is not None
        logs = "".join(runner.log_lines(handle, "cell"))
        image_used = runner.describe(handle).roles[0].image  # type: ignore[union-attr]
    return logs, image_used, status.state


def test_docker_builder(docker_env: DockerDaemon, base_images: dict[str, str], ws: Path) -> None:
    logs, image, state = run_cell(CELL, base_images["python"], ws, builder="docker")
    assert state == AppState.SUCCEEDED, logs
    assert logs == "cell ran in /workspace x,y\n"
    client = docker_env.client()
    ws_images = [
        t for i in client.images.list() for t in i.tags if t.startswith("torchx-nb/workspace:")
    ]
    out = client.containers.run(
        image,
        ["sh", "-c", "ls -a /workspace; cat /workspace/.env 2>&1; true"],
        network_mode="host",
        remove=True,
        stderr=True,
    )
    assert b"data.csv" in out and b".torchx" in out and b"No such file" in out
    assert b"do-not-ship" not in out
    logs2, image2, _ = run_cell(
        CELL + "print('edited')\n", base_images["python"], ws, builder="docker"
    )
    assert logs2.endswith("edited\n") and image2 != image
    ws_images2 = [
        t for i in client.images.list() for t in i.tags if t.startswith("torchx-nb/workspace:")
    ]
    assert sorted(ws_images2) == sorted(ws_images), "the workspace layer was reused"


def test_registry_builder(
    docker_env: DockerDaemon, python_in_registry: str, registry: Registry, ws: Path
) -> None:
    repo = f"{registry.host}/nb/jobs"
    logs, image, state = run_cell(CELL, python_in_registry, ws, builder="registry", image_repo=repo)
    assert state == AppState.SUCCEEDED, logs
    assert logs == "cell ran in /workspace x,y\n"
    assert image.startswith(f"{repo}@sha256:")


def test_dockerfile_torchx_needs_the_docker_builder(
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    python_in_registry: str,
    registry: Registry,
    ws: Path,
) -> None:
    (ws / "Dockerfile.torchx").write_text(
        "ARG IMAGE\nFROM $IMAGE\nRUN echo built-by-run > /marker\nWORKDIR /app\nCOPY . .\n"
    )
    logs, _, state = run_cell(
        "print(open('/marker').read().strip(), open('data.csv').read())",
        base_images["python"],
        ws,
        builder="docker",
    )
    assert state == AppState.SUCCEEDED and logs == "built-by-run x,y\n", logs
    with pytest.raises(TorchxNbError, match="RUN steps need a Docker daemon"):
        run_cell(
            CELL, python_in_registry, ws, builder="registry", image_repo=f"{registry.host}/nb/x"
        )


def test_registry_builder_needs_image_repo(
    docker_env: DockerDaemon, python_in_registry: str, ws: Path
) -> None:
    with pytest.raises(TorchxNbError, match="image_repo"):
        run_cell(CELL, python_in_registry, ws, builder="registry")


def test_registry_builder_reports_push_progress_where_the_notebook_asks(
    docker_env: DockerDaemon, python_in_registry: str, registry: Registry, ws: Path
) -> None:
    from torchx_nb.progress import progress_to

    calls: list[tuple[int, int, str]] = []
    closed: list[bool] = []

    class Recorder:
        def __call__(self, done: int, total: int, what: str) -> None:
            calls.append((done, total, what))

        def close(self) -> None:
            closed.append(True)

    (ws / "weights.bin").write_bytes(b"w" * 3_000_000)
    with progress_to(Recorder):
        _, _, state = run_cell(
            CELL,
            python_in_registry,
            ws,
            builder="registry",
            image_repo=f"{registry.host}/nb/progress",
            quiet=False,
        )
    assert state == AppState.SUCCEEDED
    assert calls and calls[-1][0] == calls[-1][1] and closed == [True]


def test_docker_builder_for_a_remote_scheduler_uploads_our_layers_itself(
    docker_env: DockerDaemon,
    base_images: dict[str, str],
    python_in_registry: str,
    registry: Registry,
    ws: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With image_repo and no Dockerfile.torchx, the daemon pushes only a base the registry
    lacks (once, as ``torchx-nb-base-<id>``); the workspace and cell layers go up as we made
    them, so the registry holds their exact digests; an edited cell pushes no base again; a
    base pulled from (or pushed to) that registry is used where it is, with no push."""
    import io
    import uuid

    import requests

    from torchx_nb.workspace.builders import BuildInput, DockerBuilder
    from torchx_nb.workspace.collect import collect_workspace

    client = docker_env.client()
    label = uuid.uuid4().hex  # a base this daemon never pushed, whatever ran before
    dockerfile = f"FROM {base_images['python']}\nLABEL torchx-nb-test={label}\n".encode()
    fresh = client.images.build(fileobj=io.BytesIO(dockerfile), rm=True)[0]
    assert not fresh.attrs.get("RepoDigests")
    repo = f"{registry.host}/nb/docker-remote"
    pushes: list[str] = []
    push = DockerBuilder._push

    def counted(self: DockerBuilder, image_id: str, repo: str, tag: str, quiet: bool) -> None:
        pushes.append(tag)
        push(self, image_id, repo, tag, quiet)

    monkeypatch.setattr(DockerBuilder, "_push", counted)
    files = collect_workspace(ws)
    built = DockerBuilder().build(
        BuildInput(fresh.id, files, {"c.py": b"print(1)\n"}, repo, quiet=True)
    )
    assert built.image.startswith(f"{repo}@sha256:") and built.working_dir == "/workspace"
    assert pushes == [f"torchx-nb-base-{fresh.id[7:]}"]
    for layer in built.layers:
        head = requests.head(f"http://{registry.host}/v2/nb/docker-remote/blobs/{layer.digest}")
        assert head.status_code == 200, layer
    tags = requests.get(f"http://{registry.host}/v2/nb/docker-remote/tags/list").json()["tags"]
    assert tags == pushes
    again = DockerBuilder().build(
        BuildInput(fresh.id, files, {"c.py": b"print(2)\n"}, repo, quiet=True)
    )
    assert len(pushes) == 1 and again.image != built.image
    assert again.layers[0].digest == built.layers[0].digest  # the workspace layer, reused
    out = client.containers.run(
        again.image,
        ["sh", "-c", "cd /workspace && cat data.csv && python c.py && ls -a"],
        network_mode="host",
        remove=True,
    )
    assert out.startswith(b"x,y2\n") and b".env" not in out

    # the python base was pushed to this registry (python_in_registry): used from there,
    # its manifest asked for once however many times the build needs to know where it is
    builder = DockerBuilder()
    in_registry = builder.build(BuildInput(base_images["python"], files, {}, repo, quiet=True))
    assert len(pushes) == 1
    client = builder.clients[registry.host]
    asked = client.stats.requests
    python = builder.client.images.get(base_images["python"])
    there = builder._in_registry(python, repo)
    assert client.stats.requests == asked
    # where: the manifest python_in_registry pushed, under whichever name this session's
    # other tests also pushed it (the choice among names is tested below, on `fresh`)
    pushed = requests.head(
        f"http://{registry.host}/v2/base/python/manifests/3.11",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    ).headers["Docker-Content-Digest"]
    assert there is not None and (there.host, there.reference) == (registry.host, pushed)
    manifest = requests.get(
        f"http://{registry.host}/v2/nb/docker-remote/manifests/{in_registry.image.split('@')[1]}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    ).json()
    assert python_in_registry == f"{registry.host}/base/python:3.11"
    base = requests.get(
        f"http://{registry.host}/v2/base/python/manifests/3.11",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    ).json()
    assert [x["digest"] for x in manifest["layers"][: len(base["layers"])]] == [
        x["digest"] for x in base["layers"]
    ]


def test_the_docker_builder_finds_a_base_under_several_names_in_one_order(
    docker_env: DockerDaemon, base_images: dict[str, str], registry: Registry
) -> None:
    """A base the registry holds under several names (pushed by other tests, other users):
    the job's own repository first, then the others by name, whatever order they were
    pushed in (a session that pushed the python base under a second name once changed
    where another test's build found it)."""
    import io
    import uuid

    from tests.infra.fixtures import push_to_registry
    from torchx_nb.workspace.builders import DockerBuilder

    client = docker_env.client()
    label = uuid.uuid4().hex
    dockerfile = f"FROM {base_images['busybox']}\nLABEL torchx-nb-test={label}\n".encode()
    image = client.images.build(fileobj=io.BytesIO(dockerfile), rm=True)[0]
    for name in ("zz/last", "nb/own", "aa/first"):
        push_to_registry(docker_env, image.id, f"{registry.host}/{name}-{label[:8]}:1")
    image = client.images.get(image.id)
    assert len(image.attrs["RepoDigests"]) == 3
    own = DockerBuilder()._in_registry(image, f"{registry.host}/nb/own-{label[:8]}")
    other = DockerBuilder()._in_registry(image, f"{registry.host}/nb/else-{label[:8]}")
    assert own is not None and own.repository == f"nb/own-{label[:8]}"
    assert other is not None and other.repository == f"aa/first-{label[:8]}"


def test_the_upload_target_is_where_the_build_uploads_its_own_layers(tmp_path: Path) -> None:
    """A layer can start on its way before the build only to the repository the build itself
    uploads to: the registry builder's, the docker builder's for a scheduler that pulls from
    a registry; never when the daemon pushes (local_docker's docker builder, a
    Dockerfile.torchx)."""
    from torchx_nb.schedulers import get_scheduler_factories

    factories = get_scheduler_factories()
    local = factories["local_docker"]("t")
    batch = factories["aws_batch"]("t")
    ws = tmp_path / "ws"
    ws.mkdir()
    repo = "127.0.0.1:5000/nb"
    assert local.upload_target(str(ws), local.resolve_opts({"builder": "docker"})) is None
    registry_opts = local.resolve_opts({"builder": "registry", "image_repo": repo})
    assert local.upload_target(str(ws), registry_opts) == repo
    batch_opts = batch.resolve_opts({"queue": "q", "image_repo": repo, "builder": "docker"})
    assert batch.upload_target(str(ws), batch_opts) == repo
    (ws / "Dockerfile.torchx").write_text("FROM scratch\n")
    assert batch.upload_target(str(ws), batch_opts) is None


def test_an_unknown_builder_is_refused_by_the_dry_run(tmp_path: Path) -> None:
    """``-cfg builder=nosuch`` passed the dry run (exit 0: the name was checked only when the
    build chose its builder, and the dry run's environment plan hid it in its packages
    line); the build then failed (over REST: a 502 where a 400 belongs)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from tests.conftest import cli

    nb = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("1")]), nb)
    code, out, err = cli(
        "run-notebook", "--dryrun", "-s", "local_docker", "-cfg", "builder=nosuch", str(nb)
    )
    assert (code, out) == (1, "")
    assert err == "torchx-nb: error: unknown builder 'nosuch': use auto, docker or registry\n"
    code, out, err = cli(
        "run-notebook", "--dryrun", "-s", "local_docker", "-cfg", "builder=Registry", str(nb)
    )
    assert code == 0 and "program:   the notebook nb.ipynb" in out, err
