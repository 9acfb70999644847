"""The Jupyter server extension: a REST API over the job store and the Runner under
``/torchx-nb/api/`` (jobs, one job, its logs, cancel, an event stream, the OpenAPI document),
for the JupyterLab panel and anything else that speaks HTTP. Enabled on install through
``jupyter_server_config.d/torchx_nb.json``; every endpoint needs Jupyter's authentication."""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "torchx_nb.server"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from torchx_nb.server.handlers import setup_handlers

    setup_handlers(server_app.web_app)
    server_app.log.info("torchx_nb: REST API at /torchx-nb/api/")
