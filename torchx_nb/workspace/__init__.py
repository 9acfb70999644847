"""Workspaces: which files ship with a job, and how they are patched onto an image."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from torchx_nb.specs.api import CfgVal, Role, runopts

CELL_PREFIX = ".torchx-cell-"


class WorkspaceMixin:
    """For schedulers that run images: collects the workspace (secrets excluded), writes the
    cell as a script, patches ``role.image`` with both, and re-points the cell role at the
    script. Options: ``image_repo``, ``builder`` (auto|docker|registry), ``quiet``."""

    def workspace_opts(self) -> runopts:
        opts = runopts()
        opts.add(
            "image_repo",
            type_=str,
            help="repository the patched image is pushed to"
            " (HOST/REPO); required by remote schedulers and by the registry builder",
        )
        opts.add(
            "builder",
            type_=str,
            default="auto",
            help="how the workspace is added to the"
            " image: docker (needs a daemon; builds Dockerfile.torchx), registry (no"
            " daemon), or auto",
        )
        opts.add("quiet", type_=bool, default=False, help="hide build and push output")
        return opts

    def _push_needed(self) -> bool:
        """Remote schedulers need the image in a registry; local_docker does not."""
        return True

    def preview_workspace(self, workspace: str) -> str:
        """What would ship, without building anything (for dry runs: the secret scan reads
        the files and its cache, and writes nothing)."""
        from torchx_nb.workspace.collect import collect_workspace
        from torchx_nb.workspace.scan import default_cache

        files = collect_workspace(workspace, scan=default_cache().readonly())
        files.warn()
        return files.preview()

    def plan_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        """What ``build_workspace_and_update_role`` will do to ``role``, without building or
        pushing: the cell becomes ``.torchx-cell-<sha>.py`` and the image names the patched
        image to be pushed (its digest is known only after the push). For dry runs."""
        from torchx_nb.components.cell import run_as_script

        script, _ = _cell_script(role)
        repo = cfg.get("image_repo")
        base = role.image
        role.image = (
            f"{repo}@sha256:<digest after push of {base} + workspace>"
            if repo
            else f"<{base} + workspace, built at submit>"
        )
        if script is not None:
            run_as_script(role, script)

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, CfgVal]
    ) -> None:
        from torchx_nb.components.cell import run_as_script
        from torchx_nb.workspace.builders import choose_builder
        from torchx_nb.workspace.collect import collect_workspace

        files = collect_workspace(workspace)
        files.warn()
        script, extra = _cell_script(role)
        cache: dict[Any, Any] = self.__dict__.setdefault("_workspace_builds", {})
        key = (
            role.image,
            files.fingerprint(),
            tuple(sorted(extra)),
            cfg.get("image_repo"),
            cfg.get("builder"),
        )
        if key not in cache:
            builder = choose_builder(str(cfg.get("builder") or "auto"), files)
            repo = cfg.get("image_repo")
            image_repo = str(repo) if repo else None
            if image_repo is None and (self._push_needed() or builder.name == "registry"):
                from torchx_nb.specs.api import TorchxNbError

                raise TorchxNbError(
                    "this scheduler needs the patched image in a registry: pass"
                    " -cfg image_repo=HOST/REPO"
                )
            cache[key] = builder.build(role.image, files, extra, image_repo, bool(cfg.get("quiet")))
        built = cache[key]
        role.image = built.image
        if script is not None:
            run_as_script(role, script)


def _cell_script(role: Role) -> tuple[str | None, dict[str, bytes]]:
    """The cell's script path in the image and the files to add for it (none for a role that
    is not a cell)."""
    from torchx_nb.components.cell import cell_source

    source = cell_source(role)
    if source is None:
        return None, {}
    sha = hashlib.sha256(source.encode()).hexdigest()[:12]
    # at the workspace root, so the cell imports the notebook folder's modules as it does in
    # the kernel (Python puts the script's own folder first on sys.path)
    script = f"{CELL_PREFIX}{sha}.py"
    return script, {script: source.encode()}
