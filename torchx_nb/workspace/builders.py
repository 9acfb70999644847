"""Two ways to patch a base image with the workspace and the cell, behind one interface.

- ``docker``: the Docker SDK against a daemon. Without a ``Dockerfile.torchx``, for a job on this
  daemon, the reproducible workspace layer becomes an image of its own (built once per workspace
  content), and the cell layer goes on top; for a remote scheduler, the base is found in
  ``image_repo``'s registry (or pushed there once by the daemon) and our layers are uploaded
  as they are, as the registry builder does (the daemon would unpack them and compress them
  again). With a ``Dockerfile.torchx``, the
  Dockerfile is built as TorchX does (``IMAGE``/``WORKSPACE`` build args) and pushed.
- ``registry``: no daemon. Reads the base manifest from its registry and pushes base + workspace
  layer + cell layer under ``image_repo``, uploading only blobs the repository lacks."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

from torchx_nb.lazy import LazyClient
from torchx_nb.progress import Progress, new_progress
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.collect import DOCKERFILE, WorkspaceFiles
from torchx_nb.workspace.image_contents import ImageContents
from torchx_nb.workspace.layers import Layer, build_context, build_file_layer, build_layer

if TYPE_CHECKING:
    from torchx_nb.workspace.registry import ImageRef, RegistryClient

LABEL_VERSION = "torchx.pytorch.org/version"


@dataclass
class BuiltImage:
    """The patched image and where the workspace sits inside it."""

    image: str
    working_dir: str
    uploaded_bytes: int = 0
    layers: tuple[Layer, ...] = ()


class EnvironmentLayer(Protocol):
    """The environment layer a run asks for, made for the image it goes onto (the runner
    hands one in; see ``torchx_nb.environment.layer``)."""

    def key(self) -> str: ...

    def layer_for(
        self,
        image: ImageContents,
        on_top: Mapping[str, str] | None = None,
        progress: Progress | None = None,
        stream: Callable[[Iterator[bytes]], None] | None = None,
    ) -> Layer | None: ...


@dataclass(frozen=True)
class BuildInput:
    """What a builder patches onto ``base``: the workspace's files, ``extra`` files beside them
    (the cell as a script), the environment layer to put under them, and where the result is
    pushed (``image_repo``; None: kept on the daemon). With ``same_python`` (the files hold
    what this kernel pickled) a base declaring another Python minor version is refused.
    ``local``: the job runs on this machine's daemon, so the image must be there as well."""

    base: str
    files: WorkspaceFiles
    extra: Mapping[str, bytes] = field(default_factory=dict)
    image_repo: str | None = None
    quiet: bool = False
    same_python: bool = False
    environment: EnvironmentLayer | None = None
    local: bool = False


class Builder(Protocol):
    name: str

    def read_image(self, base: str, image_repo: str | None = None) -> ImageContents: ...

    def build(self, job: BuildInput) -> BuiltImage: ...


def image_python(env: list[str] | None) -> str | None:
    """The Python ``MAJOR.MINOR`` an image declares in its config (``PYTHON_VERSION``, as the
    official python images and most images built on them set it); None when it does not."""
    for item in env or []:
        key, _, value = item.partition("=")
        if key == "PYTHON_VERSION":
            parts = value.strip().split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return f"{parts[0]}.{parts[1]}"
    return None


def check_python(base: str, env: list[str] | None) -> None:
    """Refuse, in one line and before anything is built, a base image whose Python differs
    from the kernel's: a cell's value is pickled on one side and unpickled on the other, and
    cloudpickle needs the same minor version."""
    theirs = image_python(env)
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    if theirs is not None and theirs != ours:
        raise TorchxNbError(
            f"image {base} has Python {theirs} and this kernel runs {ours}: a cell's result"
            f" needs the same minor version on both sides; use an image with Python {ours}"
        )


def _labels() -> dict[str, str]:
    from torchx_nb.version import __version__

    return {LABEL_VERSION: __version__}


def _append(
    job: BuildInput,
    base: str,
    image: Callable[[], ImageContents],
    prefix: str,
    clients: dict[str, RegistryClient],
    progress: Progress | None,
) -> tuple[str, int, tuple[Layer, ...]]:
    """``base`` (in a registry) + the environment layer made for ``image()`` + the workspace
    and cell layers, pushed to ``job.image_repo`` uploading only what it lacks: (image,
    uploaded bytes, layers)."""
    from torchx_nb.workspace.image_config import append_layers
    from torchx_nb.workspace.registry import finish_uploads, start_upload

    assert job.image_repo
    layers: list[Layer] = []
    history: list[str] = []
    if job.environment is not None:
        repo = job.image_repo

        def upload(chunks: Iterator[bytes]) -> None:
            start_upload(repo, chunks, clients)

        env = job.environment.layer_for(image(), progress=progress, stream=upload)
        finish_uploads(repo)
        if env is not None:
            layers.append(env)
            history.append("environment")
    layers.append(build_layer(job.files, prefix))
    history.append("workspace")
    cell = build_file_layer(job.extra, prefix) if job.extra else None
    if cell is not None:
        layers.append(cell)
        history.append("cell")
    try:
        result = append_layers(
            base,
            job.image_repo,
            layers,
            labels=_labels(),
            history=history,
            on_progress=progress,
            clients=clients,
        )
    finally:
        if cell is not None:
            cell.path.unlink(missing_ok=True)  # the cell's source: not kept once pushed
    return result.image, result.stats.uploaded_bytes, tuple(layers)


class RegistryBuilder:
    """Daemonless: base manifest → + workspace layer → + cell layer, pushed to image_repo."""

    name = "registry"

    def __init__(self) -> None:
        self.clients: dict[str, RegistryClient] = {}

    def read_image(self, base: str, image_repo: str | None = None) -> ImageContents:
        """What ``base`` has for Python, read from its layers through its registry."""
        from torchx_nb.workspace.image_contents import from_registry
        from torchx_nb.workspace.registry import ImageRef, RegistryClient

        ref = ImageRef.parse(base)
        client = self.clients.setdefault(ref.host, RegistryClient(ref.host))
        return from_registry(client, ref)

    def build(self, job: BuildInput) -> BuiltImage:
        from torchx_nb.workspace.image_config import working_dir_for
        from torchx_nb.workspace.registry import ImageRef, RegistryClient

        if not job.image_repo:
            raise TorchxNbError(
                "the registry builder needs image_repo (-cfg image_repo=HOST/REPO) to push the"
                " patched image to"
            )
        if any(f.path == DOCKERFILE for f in job.files.files):
            raise TorchxNbError(
                f"the workspace has a {DOCKERFILE}; its RUN steps need a Docker daemon:"
                " use -cfg builder=docker"
            )
        ref = ImageRef.parse(job.base)
        client = self.clients.setdefault(ref.host, RegistryClient(ref.host))
        manifest, _, _ = client.get_manifest(ref)
        config = json.loads(client.get_blob(ref.repository, manifest["config"]["digest"]))
        if job.same_python:
            check_python(job.base, config.get("config", {}).get("Env"))
        work = working_dir_for(config)
        prefix = work.strip("/")
        progress = None if job.quiet else new_progress()
        try:
            image, uploaded, layers = _append(
                job, job.base, lambda: self.read_image(job.base), prefix, self.clients, progress
            )
        finally:
            if progress:
                progress.close()
        return BuiltImage(image, work, uploaded, layers)


def _environment_layer(
    environment: EnvironmentLayer,
    image: ImageContents,
    on_top: Mapping[str, str] | None,
    quiet: bool,
) -> Layer | None:
    """The environment layer for ``image``, its making shown on a progress bar of its own."""
    progress = None if quiet else new_progress()
    try:
        return environment.layer_for(image, on_top, progress)
    finally:
        if progress:
            progress.close()


def _context(files: dict[str, bytes | Layer]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in sorted(files.items()):
            data = content.path.read_bytes() if isinstance(content, Layer) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


class DockerBuilder:
    """Builds with a Docker daemon (classic builder), pushing to image_repo when given."""

    name = "docker"

    def __init__(self, client: Any = None) -> None:
        self._client = client
        self.clients: dict[str, RegistryClient] = {}
        self._found: dict[tuple[str, str], ImageRef] = {}  # (image id, host) -> where

    client = LazyClient(lambda self: _daemon_client())

    def _ensure_base(self, base: str) -> Any:
        import docker

        try:
            return self.client.images.get(base)
        except docker.errors.ImageNotFound:
            try:
                return self.client.images.pull(base)
            except docker.errors.APIError as e:
                raise TorchxNbError(
                    f"base image {base!r} is not on the Docker daemon and cannot"
                    f" be pulled ({e.explanation or e})"
                ) from None

    def _build(
        self,
        context: IO[bytes],
        tag: str | None,
        quiet: bool,
        buildargs: dict[str, str] | None = None,
        dockerfile: str = "Dockerfile",
        encoding: str | None = None,
    ) -> str:
        image_id = None
        for event in self.client.api.build(
            fileobj=context,
            custom_context=True,
            encoding=encoding,
            tag=tag,
            dockerfile=dockerfile,
            buildargs=buildargs or {},
            rm=True,
            decode=True,
            labels=_labels(),
            pull=False,
        ):
            if "error" in event:
                raise TorchxNbError(f"docker build failed: {event['error'].strip()}")
            if not quiet and event.get("stream"):
                sys.stderr.write(event["stream"])
            aux = event.get("aux") or {}
            image_id = aux.get("ID", image_id)
        if image_id is None:
            raise TorchxNbError("docker build returned no image id")
        return str(image_id)

    def read_image(self, base: str, image_repo: str | None = None) -> ImageContents:
        """What ``base`` has for Python, read from the daemon's copy of its layers; for an
        image pushed to ``image_repo``, from that registry when the base is there already
        (its layers are streamed a few at once, and the daemon need not export them)."""
        return self._contents(self._ensure_base(base), image_repo)

    def _contents(self, base_image: Any, image_repo: str | None) -> ImageContents:
        from torchx_nb.workspace.image_contents import from_daemon, from_registry

        there = self._in_registry(base_image, image_repo) if image_repo else None
        if there is not None:
            return from_registry(self.clients[there.host], there)
        return from_daemon(self.client, base_image)

    def _in_registry(self, base_image: Any, image_repo: str) -> ImageRef | None:
        """Where the registry of ``image_repo`` has the daemon's ``base_image`` (it was pulled
        from or pushed there: a repo digest naming the same config), if it does. When it is
        there under several names, ``image_repo``'s own repository first, then the others in
        the order of their names (not the daemon's order, nor the order they were pushed
        in)."""
        from torchx_nb.workspace.registry import ImageRef, RegistryClient, RegistryError

        own = ImageRef.parse(f"{image_repo}:x")
        host = own.host
        if (str(base_image.id), host) in self._found:  # one build asks up to three times
            return self._found[str(base_image.id), host]
        client = self.clients.setdefault(host, RegistryClient(host))
        refs = [ImageRef.parse(k) for k in base_image.attrs.get("RepoDigests") or []]
        for there in sorted(
            (r for r in refs if r.host == host),
            key=lambda r: (r.repository != own.repository, r.repository, r.reference),
        ):
            try:
                manifest, _, _ = client.get_manifest(there)
            except RegistryError:
                continue
            if manifest.get("config", {}).get("digest") == base_image.id:
                self._found[str(base_image.id), host] = there
                return there
        return None

    def _add_layer(self, image_id: str, layer: Layer, tag: str | None, quiet: bool) -> str:
        """``image_id`` + ``layer`` as an image (tagged ``tag``, reused when it exists)."""
        import docker

        if tag is not None:
            try:
                return str(self.client.images.get(tag).id)
            except docker.errors.ImageNotFound:
                pass
        dockerfile = f"FROM {image_id}\nADD layer.tar.gz /\n"
        built = self._build(
            _context({"Dockerfile": dockerfile.encode(), "layer.tar.gz": layer}), tag, quiet
        )
        return str(self.client.images.get(tag).id) if tag else built

    def _environment_on_top(
        self, base_image: Any, image_id: str, environment: EnvironmentLayer, quiet: bool
    ) -> tuple[str, Layer | None]:
        """A Dockerfile.torchx's image + the environment layer, diffed against what that
        image has: what the Dockerfile installed stays, whatever its version."""
        from torchx_nb.workspace.image_contents import from_daemon

        before = from_daemon(self.client, base_image).distributions
        built = from_daemon(self.client, self.client.images.get(image_id))
        on_top = {k: v for k, v in built.distributions.items() if before.get(k) != v}
        env = _environment_layer(environment, built, on_top, quiet)
        if env is None:
            return image_id, None
        return self._add_layer(image_id, env, None, quiet), env

    def _push(self, image_id: str, repo: str, tag: str, quiet: bool) -> None:
        """``docker push`` of ``image_id`` as ``repo:tag``, its progress on a bar."""
        self.client.images.get(image_id).tag(repo, tag)
        progress = None if quiet else new_progress()
        try:
            pushed = self.client.images.push(
                repo, tag, stream=True, decode=True, auth_config=_token_login(repo)
            )
            for event in pushed:
                if "error" in event:
                    raise TorchxNbError(f"push to {repo} failed: {event['error'].strip()}")
                detail = event.get("progressDetail") or {}
                if progress and detail.get("total"):
                    progress(detail.get("current", 0), detail["total"], event.get("id", ""))
        finally:
            if progress:
                progress.close()

    def _base_in_registry(self, base_image: Any, repo: str, quiet: bool) -> str:
        """The daemon's base in ``repo``'s registry: where it was pulled from or pushed to
        (a repo digest on that registry naming the same image), else pushed by the daemon as
        ``repo:torchx-nb-base-<image id>`` the first time (only the layers the registry
        lacks) and found there after."""
        from torchx_nb.workspace.registry import ImageRef, RegistryClient

        there = self._in_registry(base_image, repo)
        if there is not None:
            return str(there)
        tag = f"torchx-nb-base-{str(base_image.id).split(':')[-1]}"
        ref = ImageRef.parse(f"{repo}:{tag}")
        client = self.clients.setdefault(ref.host, RegistryClient(ref.host))
        if not client.manifest_exists(ref):
            self._push(str(base_image.id), repo, tag, quiet)
        return str(ref)

    def _append_through_registry(self, job: BuildInput, base_image: Any, work: str) -> BuiltImage:
        """For a remote scheduler: the base pushed by the daemon, our layers uploaded as the
        registry builder uploads them (no unpacking by the daemon, no second compression)."""
        assert job.image_repo
        repo = job.image_repo
        base = self._base_in_registry(base_image, repo, job.quiet)
        progress = None if job.quiet else new_progress()
        try:
            image, uploaded, layers = _append(
                job,
                base,
                lambda: self._contents(base_image, repo),
                work.strip("/"),
                self.clients,
                progress,
            )
        finally:
            if progress:
                progress.close()
        return BuiltImage(image, work, uploaded, layers)

    def build(self, job: BuildInput) -> BuiltImage:
        import docker

        environment = job.environment
        base_image = self._ensure_base(job.base)
        if job.same_python:
            check_python(job.base, base_image.attrs.get("Config", {}).get("Env"))
        wd = base_image.attrs.get("Config", {}).get("WorkingDir") or ""
        work = wd if wd not in ("", "/") else "/workspace"
        prefix = work.strip("/")
        layers: list[Layer] = []
        has_dockerfile = any(f.path == DOCKERFILE for f in job.files.files)
        if job.image_repo and not job.local and not has_dockerfile:
            return self._append_through_registry(job, base_image, work)
        if has_dockerfile:
            # the checked file list, opened without following links, as the layer path does
            context = build_context(job.files, job.extra)
            try:
                with open(context.path, "rb") as fileobj:
                    image_id = self._build(
                        fileobj,
                        None,
                        job.quiet,
                        {"IMAGE": job.base, "WORKSPACE": str(job.files.root)},
                        DOCKERFILE,
                        encoding="gzip",
                    )
            finally:
                context.path.unlink(missing_ok=True)
            work = self.client.images.get(image_id).attrs["Config"].get("WorkingDir") or "/"
            if environment is not None:
                image_id, env = self._environment_on_top(
                    base_image, image_id, environment, job.quiet
                )
                layers += [env] if env else []
        else:
            under = str(base_image.id)
            if environment is not None:
                from torchx_nb.workspace.image_contents import from_daemon

                env = _environment_layer(
                    environment, from_daemon(self.client, base_image), None, job.quiet
                )
                if env is not None:
                    layers.append(env)
                    env_tag = f"torchx-nb/env:{env.digest[7:19]}-{base_image.id[7:19]}"
                    under = self._add_layer(under, env, env_tag, job.quiet)
            ws = build_layer(job.files, prefix)
            layers.append(ws)
            ws_tag = f"torchx-nb/workspace:{ws.digest[7:19]}-{under[7:19]}"
            try:
                self.client.images.get(ws_tag)
            except docker.errors.ImageNotFound:
                dockerfile = f"FROM {under}\nADD ws.tar.gz /\nWORKDIR {work}\n"
                self._build(
                    _context({"Dockerfile": dockerfile.encode(), "ws.tar.gz": ws}),
                    ws_tag,
                    job.quiet,
                )
            image_id = self.client.images.get(ws_tag).id
            if job.extra:
                cell = build_file_layer(job.extra, prefix)
                layers.append(cell)
                dockerfile = f"FROM {ws_tag}\nADD cell.tar.gz /\n"
                try:
                    image_id = self._build(
                        _context({"Dockerfile": dockerfile.encode(), "cell.tar.gz": cell}),
                        None,
                        job.quiet,
                    )
                finally:
                    cell.path.unlink(missing_ok=True)  # the cell's source: not kept once built
        if not job.image_repo:
            return BuiltImage(image_id, work, 0, tuple(layers))
        tag = image_id.split(":")[-1][:16]
        self._push(image_id, job.image_repo, tag, job.quiet)
        return BuiltImage(f"{job.image_repo}:{tag}", work, 0, tuple(layers))


def _daemon_client() -> Any:
    from torchx_nb.workspace.daemon import docker_client

    return docker_client()


def _token_login(image_repo: str) -> dict[str, str] | None:
    """A registry login docker-py cannot find in the docker config: an ECR token or a Google
    access token (Artifact Registry), passed with the push. None leaves it to the config."""
    from torchx_nb.workspace.registry_auth import ecr_credentials, google_credentials

    host = image_repo.split("/", 1)[0]
    creds = ecr_credentials(host) or google_credentials(host)
    return {"username": creds.username, "password": creds.password} if creds else None


def daemon_reachable() -> bool:
    """Whether a Docker daemon answers (``DOCKER_HOST`` or the default socket)."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def builder_name(name: str | None) -> str:
    """The builder ``-cfg builder`` names (``auto`` when none): one of auto, docker or
    registry, else the one line (a dry run checks it too, before anything is built)."""
    name = (name or "auto").lower()
    if name not in ("auto", "docker", "registry"):
        raise TorchxNbError(f"unknown builder {name!r}: use auto, docker or registry")
    return name


def choose_builder(name: str | None, dockerfile: bool) -> Builder:
    """``docker`` or ``registry`` as asked; ``auto`` picks docker when a daemon answers or the
    workspace's Dockerfile.torchx (``dockerfile``) needs one, else registry."""
    name = builder_name(name)
    if name == "docker":
        return DockerBuilder()
    if name == "registry":
        return RegistryBuilder()
    if dockerfile or daemon_reachable():
        return DockerBuilder()
    return RegistryBuilder()
