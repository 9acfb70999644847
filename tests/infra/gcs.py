"""gcp-storage-emulator on 127.0.0.1: Google Cloud Storage's JSON API, in memory, for the real
google-cloud-storage client (``STORAGE_EMULATOR_HOST``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra.dockerd import _stop, _wait, free_port


@dataclass
class GcsEmulator:
    endpoint: str
    proc: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def client(self) -> Any:
        from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]

        return storage.Client.create_anonymous_client()

    def bucket(self, name: str) -> Any:
        """A new bucket ``name`` (``STORAGE_EMULATOR_HOST`` must be set)."""
        client = self.client()
        client.project = "test-project"
        return client.create_bucket(name)

    def stop(self) -> None:
        _stop(self.proc, 5)


def gcs_available() -> str | None:
    try:
        import gcp_storage_emulator  # noqa: F401
        from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]  # noqa: F401
    except ImportError:
        return "gcp-storage-emulator or google-cloud-storage is not installed"
    return None


def start_gcs(state_dir: Path) -> GcsEmulator:
    state_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    exe = shutil.which("gcp-storage-emulator")
    cmd = [exe] if exe else [sys.executable, "-m", "gcp_storage_emulator"]
    log = state_dir / "gcs.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*cmd, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server = GcsEmulator(f"http://127.0.0.1:{port}", proc)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("gcp-storage-emulator exited")
        urllib.request.urlopen(f"{server.endpoint}/storage/v1/b?project=p", timeout=2)
        return True

    _wait(up, 60, "gcp-storage-emulator", log)
    return server
