"""Real parts that go away and come back: the registry stopped in the middle of a push, and
moto_server stopped while the poller watches a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import wait_for
from tests.infra.dockerd import DockerDaemon, start_registry
from tests.infra.fixtures import push_to_registry
from tests.infra.moto import MotoServer, make_queue, start_moto
from torchx_nb import specs
from torchx_nb.refresher import Refresher
from torchx_nb.runner import Runner
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.builders import BuildInput, RegistryBuilder
from torchx_nb.workspace.collect import collect_workspace
from torchx_nb.workspace.registry import RegistryClient


class StopOnFirstUpload(requests.Session):
    """Stops the registry as the first blob upload starts: a push cut off half way."""

    def __init__(self, stop: Any) -> None:
        super().__init__()
        self.stop = stop
        self.stopped = False

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if method in ("PATCH", "PUT") and "/blobs/uploads/" in url and not self.stopped:
            self.stopped = True
            self.stop()
        return super().request(method, url, *args, **kwargs)


def test_push_interrupted_by_a_registry_restart_fails_clearly_then_succeeds(
    dockerd: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    reg = start_registry(tmp_path / "reg")
    base = push_to_registry(dockerd, base_images["busybox"], f"{reg.host}/base/busybox:1")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.bin").write_bytes(b"x" * 300_000)
    files = collect_workspace(ws)
    builder = RegistryBuilder()
    session = StopOnFirstUpload(reg.stop)
    builder.clients[reg.host] = RegistryClient(reg.host, session=session)
    with pytest.raises(TorchxNbError) as err:
        builder.build(BuildInput(base, files, {}, f"{reg.host}/jobs", quiet=True))
    assert session.stopped
    assert "unreachable" in str(err.value) and "\n" not in str(err.value)

    port = int(reg.host.rsplit(":", 1)[1])
    again = start_registry(tmp_path / "reg", port=port)
    try:
        built = RegistryBuilder().build(
            BuildInput(base, files, {}, f"{again.host}/jobs", quiet=True)
        )
        ref = built.image
        repo, _, digest = ref.partition("@")
        manifest = requests.get(
            f"http://{again.host}/v2/{repo.split('/', 1)[1]}/manifests/{digest or 'latest'}",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
            timeout=10,
        )
        assert manifest.status_code == 200
        for layer in manifest.json()["layers"]:
            blob = requests.head(
                f"http://{again.host}/v2/{repo.split('/', 1)[1]}/blobs/{layer['digest']}",
                timeout=10,
            )
            assert blob.status_code == 200
    finally:
        again.stop()


def test_poller_reports_a_stopped_moto_and_recovers_when_it_returns(
    dockerd: DockerDaemon,
    base_images: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = start_moto(tmp_path / "moto", dockerd.base_url)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    queue = make_queue(server, "restarts")
    app = specs.AppDef(
        name="long",
        roles=[
            specs.Role(
                name="main",
                image=base_images["busybox"],
                entrypoint="sh",
                args=["-c", "sleep 60"],
                resource=specs.Resource(cpu=1, gpu=0, memMB=256),
            )
        ],
    )
    runner = Runner("torchx")
    handle = runner.run(app, "aws_batch", {"queue": queue})
    events: list[str] = []
    poller = Refresher(runner, remote_interval=0.05, max_backoff=0.5)

    def seen(status: Any, error: BaseException | None) -> None:
        events.append("error" if error else "gone" if status is None else status.state.name)

    poller.watch(handle, seen)
    port = int(server.endpoint.rsplit(":", 1)[1])
    restarted: MotoServer | None = None
    try:
        wait_for(lambda: "RUNNING" in events, 60)
        server.stop()
        wait_for(lambda: "error" in events, 30)
        assert poller.watching == 1, "an outage must not end the watch"
        restarted = start_moto(tmp_path / "moto2", dockerd.base_url, port=port)
        # moto forgot the job: reported, not raised (a generous wait: on a loaded machine the
        # restarted server and the scheduler client's own retry backoff take their time)
        try:
            wait_for(lambda: events[-1] == "gone", 90)
        except BaseException:
            raise AssertionError(f"no 'gone' after the restart; events: {events[-12:]}") from None
        rec = runner.jobstore.get(handle)
        assert rec is not None, "a submitted job stays in the job store"
    finally:
        poller.stop()
        if restarted is not None:
            restarted.stop()
        for c in dockerd.client().containers.list(all=True):
            if c.name.startswith("torchx"):
                c.remove(force=True)
