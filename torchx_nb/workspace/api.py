"""TorchX's ``torchx.workspace.api`` path: where a scheduler written for TorchX imports
``WorkspaceMixin`` from. The code lives in ``torchx_nb.workspace`` (the mixin, its options)
and ``torchx_nb.workspace.collect`` (which files ship: TorchX's ``walk_workspace``);
TorchX's ``dir_workspace.DirWorkspaceMixin`` is ``torchx_nb.schedulers.abilities`` (a
scheduler's ability, above this layer) and ``docker_workspace.DockerWorkspaceMixin`` is
``WorkspaceMixin`` itself (``builder=docker``): docs/torchx-differences.md has the table."""

from __future__ import annotations

from torchx_nb.workspace import WorkspaceMixin, WorkspaceOpts
from torchx_nb.workspace.collect import WorkspaceError, collect_workspace

__all__ = ["WorkspaceError", "WorkspaceMixin", "WorkspaceOpts", "collect_workspace"]
