"""The Jupyter server extension as a jupyter_server ``ExtensionApp``: it owns the job service
(one per server) and registers the REST API's handlers. Its intervals are configurable like any
Jupyter option (``--TorchxNbApp.local_interval=0.5``, or in ``jupyter_server_config.py``)."""

from __future__ import annotations

from pathlib import Path

from jupyter_core.paths import jupyter_path
from jupyter_server.extension.application import ExtensionApp
from traitlets import Float

from torchx_nb.server.handlers import ROUTES
from torchx_nb.server.jobs import JobService

NO_PANEL = (
    "torchx_nb: the JupyterLab panel is not installed (this copy was installed from source"
    " without Node.js); install Node.js and reinstall torchx_nb, or install a released wheel"
)


def panel_installed() -> bool:
    """Whether the JupyterLab extension (the panel) is where JupyterLab looks for it."""
    return any(
        (Path(p) / "torchx-nb" / "package.json").is_file() for p in jupyter_path("labextensions")
    )


class TorchxNbApp(ExtensionApp):
    """Serves every job in the job store under ``/torchx-nb/api/``."""

    name = "torchx_nb"
    load_other_extensions = True

    local_interval = Float(
        1.0, help="seconds between status polls of local jobs while the event stream is open"
    ).tag(config=True)
    remote_interval = Float(
        5.0, help="seconds between status polls of remote jobs while the event stream is open"
    ).tag(config=True)

    heartbeat = Float(
        15.0, help="seconds of silence after which the event stream sends a comment line"
    ).tag(config=True)

    jobs: JobService

    def initialize_settings(self) -> None:
        root = getattr(self.serverapp, "root_dir", None)
        self.jobs = JobService(
            self.local_interval, self.remote_interval, root_dir=root, heartbeat=self.heartbeat
        )
        self.jobs.warm_up()
        self.log.info("torchx_nb: REST API at /torchx-nb/api/")
        if not panel_installed():
            self.log.warning(NO_PANEL)

    def initialize_handlers(self) -> None:
        self.handlers.extend(ROUTES)

    async def stop_extension(self) -> None:
        self.jobs.close()
