"""Workspaces: which files ship with a job, and how they are patched onto an image."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from torchx_nb.specs.api import Role, TorchxNbError, as_cfg, runopts
from torchx_nb.specs.structured_opts import StructuredOpts

if TYPE_CHECKING:
    from torchx_nb.specs.api import AppDef
    from torchx_nb.workspace.builders import EnvironmentLayer
    from torchx_nb.workspace.image_contents import ImageContents
    from torchx_nb.workspace.use import ProgramJob, WorkspaceUse


@dataclasses.dataclass(kw_only=True)
class WorkspaceOpts(StructuredOpts):
    """The options of every scheduler that patches an image (``WorkspaceMixin``)."""

    image_repo: str | None = None
    """repository the patched image is pushed to (HOST/REPO); required by remote schedulers
    and by the registry builder"""

    builder: str = "auto"
    """how the workspace is added to the image: docker (needs a daemon; builds
    Dockerfile.torchx), registry (no daemon), or auto"""

    quiet: bool = False
    """hide build and push output"""


T = TypeVar("T")


class WorkspaceMixin(Generic[T]):
    """Ability: the scheduler runs images, and a workspace is patched onto the role's image:
    the workspace collected (secrets left out), files generated for the job (the cell as a
    script) added, pushed to ``image_repo`` when the scheduler needs it in a registry.
    TorchX's name, generic as TorchX's is (``WorkspaceMixin[None]``: ``T`` is what a
    push plan holds), so a scheduler written for TorchX subclasses it unchanged and its own
    ``build_workspace_and_update_role`` is what ``submit`` calls; its options are
    ``WorkspaceOpts``."""

    #: remote schedulers need the patched image in a registry; local_docker does not
    pushes_image: bool = True

    def workspace_opts(self) -> runopts:
        return WorkspaceOpts.as_runopts()

    def preview_workspace(self, workspace: str, cfg: Any = None) -> str | None:
        """What would ship, without building anything (for dry runs: the secret scan reads
        the files and its cache, and writes nothing)."""
        from torchx_nb.workspace.collect import collect_workspace
        from torchx_nb.workspace.scan import default_cache

        files = collect_workspace(workspace, scan=default_cache().readonly())
        files.warn()
        return files.preview()

    def image_opts(self, cfg: Any, build: bool) -> WorkspaceOpts:
        """The options an image is planned (``build`` False) or built with, in the backend's
        own option type (a ``WorkspaceOpts``): a backend checks here what must hold before
        anything is built or pushed, or fills in a default ``image_repo``. By default the
        typed options as they are; a scheduler written TorchX's way, whose options are a
        mapping, gets its workspace options read out of it here (its one edge)."""
        if isinstance(cfg, WorkspaceOpts):
            return cfg
        keys = {f.name for f in dataclasses.fields(WorkspaceOpts)}
        given = as_cfg(cfg)
        return WorkspaceOpts.from_cfg(
            {k: v for k, v in given.items() if k in keys and v is not None}
        )

    def plan_image(self, role: Role, workspace: str, cfg: Any) -> None:
        """What ``patch_image`` will make of ``role.image``, without building or pushing: the
        patched image to be pushed (its digest is known only after the push). For dry runs;
        an unknown builder is refused here as the build would."""
        from torchx_nb.workspace.builders import builder_name

        opts = self.image_opts(cfg, build=False)
        builder_name(opts.builder)
        repo = opts.image_repo
        base = role.image
        role.image = (
            f"{repo}@sha256:<digest after push of {base} + workspace>"
            if repo
            else f"<{base} + workspace, built at submit>"
        )

    def read_base_image(self, image: str, workspace: str, cfg: Any) -> ImageContents:
        """What ``image`` has for Python (version, platform, distributions), read by the
        builder ``patch_image`` would use: through its registry, or from the daemon. For the
        environment plan, dry runs included (cached per image digest)."""
        builder, opts, _ = self._planned_builder(workspace, cfg)
        return builder.read_image(image, opts.image_repo)

    def upload_target(self, workspace: str, cfg: Any) -> str | None:
        """The repository ``patch_image`` will upload its own layers to (the registry
        builder's, or the docker builder's for a scheduler that pulls from a registry), so
        that a layer can start on its way before the build: None when the daemon pushes."""
        builder, opts, dockerfile = self._planned_builder(workspace, cfg)
        if builder.name == "registry" or (self.pushes_image and not dockerfile):
            return opts.image_repo
        return None

    def _planned_builder(self, workspace: str, cfg: Any) -> tuple[Any, WorkspaceOpts, bool]:
        """The builder a build would choose, its options, and whether the workspace has a
        Dockerfile.torchx (the workspace is listed, its secret scan only read, just when it
        may hold one: the one file that changes the choice)."""
        from pathlib import Path

        from torchx_nb.workspace.builders import choose_builder
        from torchx_nb.workspace.collect import DOCKERFILE, collect_workspace
        from torchx_nb.workspace.scan import default_cache

        opts = self.image_opts(cfg, build=False)
        dockerfile = (Path(workspace).expanduser() / DOCKERFILE).is_file() and any(
            f.path == DOCKERFILE
            for f in collect_workspace(workspace, scan=default_cache().readonly()).files
        )
        return choose_builder(opts.builder, dockerfile), opts, dockerfile

    def patch_image(
        self,
        role: Role,
        workspace: str,
        cfg: Any,
        files: Mapping[str, bytes],
        same_python: bool = False,
        environment: EnvironmentLayer | None = None,
    ) -> None:
        """Patch ``role.image`` with the environment layer (when given), the workspace and
        ``files`` (paths relative to it); the build is reused while the environment, the
        workspace, the files and the options are unchanged. With ``same_python`` (the files
        hold what this kernel pickled), an image declaring another Python minor version is
        refused before anything is built."""
        from torchx_nb.workspace.builders import BuildInput, choose_builder
        from torchx_nb.workspace.collect import DOCKERFILE, collect_workspace

        opts = self.image_opts(cfg, build=True)
        collected = collect_workspace(workspace)
        collected.warn()
        cache: dict[Any, Any] = self.__dict__.setdefault("_workspace_builds", {})
        extra = dict(files)
        key = (
            role.image,
            collected.fingerprint(),
            tuple(sorted((k, hash(v)) for k, v in extra.items())),
            opts.image_repo,
            opts.builder,
            environment.key() if environment is not None else None,
        )
        if key not in cache:
            builder = choose_builder(
                opts.builder, any(f.path == DOCKERFILE for f in collected.files)
            )
            if opts.image_repo is None and (self.pushes_image or builder.name == "registry"):
                raise TorchxNbError(
                    "this scheduler needs the patched image in a registry: pass"
                    " -cfg image_repo=HOST/REPO"
                )
            cache[key] = builder.build(
                BuildInput(
                    role.image,
                    collected,
                    extra,
                    opts.image_repo,
                    opts.quiet,
                    same_python,
                    environment,
                    local=not self.pushes_image,
                )
            )
        role.image = cache[key].image

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, Any]
    ) -> None:
        """TorchX's name: patch ``role.image`` with the workspace."""
        self.patch_image(role, workspace, cfg, {})

    def use_workspace(
        self, app: AppDef, workspace: str, cfg: Any, job: ProgramJob, build: bool
    ) -> WorkspaceUse:
        """Use ``workspace`` for ``app`` as this ability does: patched onto each role's image
        (planned only, for a dry run), with the environment layer the program needs, and
        the program's files for the role that runs it (then pointed at them)."""
        from torchx_nb.workspace.use import ImageWorkspace

        for role in app.roles:
            extra = job.files() if role is job.role else None
            if extra is not None:  # the runner names it when the cell needs a module it lacks
                role.env["TORCHX_NB_BASE_IMAGE"] = role.image
            plan = job.environment(role.image)
            try:
                if extra is not None and plan is not None:
                    extra.update(job.environment_files(plan))
                if build:
                    layer = job.environment_layer(plan) if plan is not None else None
                    pickles = job.pickles and extra is not None
                    self.patch_image(role, workspace, cfg, extra or {}, pickles, layer)
                else:
                    self.plan_image(role, workspace, cfg)
            finally:
                if plan is not None:
                    job.release(plan)  # a head start the build did not take, or a refusal
            if extra is not None:
                job.point(role, "")
        preview = None if build else self.preview_workspace(workspace)
        return ImageWorkspace(workspace, preview, job.role is not None)
