"""The Jupyter server extension: a REST API over the job store and the Runner under
``/torchx-nb/api/`` (jobs, one job, its logs, cancel, an event stream, the OpenAPI document),
for the JupyterLab panel and anything else that speaks HTTP. Enabled on install through
``jupyter_server_config.d/torchx_nb.json``; every endpoint needs Jupyter's authentication."""

from __future__ import annotations

from typing import Any

from torchx_nb.version import __version__


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from torchx_nb.server.app import TorchxNbApp

    return [{"module": "torchx_nb.server", "app": TorchxNbApp}]


__all__ = ["__version__"]
