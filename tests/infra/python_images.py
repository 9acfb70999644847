"""Base images with the Python layouts real images have, built offline on the bookworm python
base (nothing can be pulled): a CPython built from source in ``/usr/local`` as the official
``python:3.x-slim`` images have it, a virtualenv on ``PATH`` over Debian's python3
(``ENV PATH=/opt/venv/bin:$PATH``), and a conda-style prefix (``/opt/conda`` with
``conda-meta``) first on ``PATH``. The from-source CPython is this machine's own (a pyenv
build: upstream ``site.py``, ``lib/python3.N/site-packages``), its standard library copied
without tests or installed packages; its ``libpython`` goes where the loader looks."""

from __future__ import annotations

import io
import sys
import sysconfig
import tarfile
from pathlib import Path
from typing import Any

from tests.infra.dockerd import CACHE, PYTHON_IMAGE

PATH_TAIL = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMAGES = {
    "usrlocal": "localhost/torchx-nb-test/python-usrlocal:1",
    "venv": "localhost/torchx-nb-test/python-venv:1",
    "conda": "localhost/torchx-nb-test/python-conda:1",
}
_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "__pycache__"}


def _cpython_tar(dest: Path) -> Path:
    """This machine's CPython as a prefix (bin/python3.N, python3, python; lib/python3.N
    with an empty site-packages), once."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    tarball = dest / f"cpython-{ver}-prefix.tar"
    if tarball.exists():
        return tarball
    base = Path(sys.base_prefix)
    stdlib = Path(sysconfig.get_paths(vars={"base": str(base)})["stdlib"])
    exe = base / "bin" / f"python{ver}"
    partial = tarball.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        tar.add(exe, arcname=f"bin/python{ver}")
        for name, target in (("python3", f"python{ver}"), ("python", "python3")):
            info = tarfile.TarInfo(f"bin/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            parts = Path(info.name).parts
            return None if _SKIP & set(parts[2:3] + parts[-1:]) else info

        tar.add(stdlib, arcname=f"lib/python{ver}", filter=keep)
        site = tarfile.TarInfo(f"lib/python{ver}/site-packages")
        site.type, site.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(site)
    partial.rename(tarball)
    return tarball


def _libpython_tar() -> bytes:
    """The shared libpython the CPython links against (its RUNPATH names this machine's
    prefix; in the image it sits in the loader's own folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for lib in sorted((Path(sys.base_prefix) / "lib").glob("libpython3.*.so.1.0")):
            tar.add(lib.resolve(), arcname=lib.name)
    return buf.getvalue()


def _venv_tar() -> bytes:
    """A virtualenv of Debian's python3 (what ``python3 -m venv --without-pip`` makes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        cfg = b"home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n"
        info = tarfile.TarInfo("pyvenv.cfg")
        info.size = len(cfg)
        tar.addfile(info, io.BytesIO(cfg))
        for name, target in (
            ("bin/python", "/usr/bin/python3"),
            ("bin/python3", "python"),
            ("bin/python3.11", "python"),
        ):
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
        site = tarfile.TarInfo("lib/python3.11/site-packages")
        site.type, site.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(site)
    return buf.getvalue()


def _build(client: Any, tag: str, dockerfile: str, files: dict[str, bytes | Path]) -> None:
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            if isinstance(data, Path):
                tar.add(data, arcname=name)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, pull=False, rm=True)


def python_layout_images(client: Any, base: str = PYTHON_IMAGE) -> dict[str, str]:
    """The three layouts (``usrlocal``, ``venv``, ``conda``) in the daemon, built if missing."""
    import docker

    missing = []
    for key, tag in IMAGES.items():
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            missing.append(key)
    if not missing:
        return dict(IMAGES)
    dest = CACHE / "base-images"
    dest.mkdir(parents=True, exist_ok=True)
    cpython = _cpython_tar(dest)
    multiarch = "/usr/lib/x86_64-linux-gnu/"
    for key in missing:
        if key == "venv":
            docker_file = (
                f"FROM {base}\nADD venv.tar /opt/venv/\n"
                f"ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:{PATH_TAIL}\n"
            )
            _build(client, IMAGES[key], docker_file, {"venv.tar": _venv_tar()})
            continue
        prefix = "/usr/local/" if key == "usrlocal" else "/opt/conda/"
        lines = [f"FROM {base}", f"ADD cpython.tar {prefix}", f"ADD libpython.tar {multiarch}"]
        if key == "conda":
            lines += [
                "ADD history /opt/conda/conda-meta/history",
                f"ENV PATH=/opt/conda/bin:{PATH_TAIL} CONDA_PREFIX=/opt/conda",
            ]
        else:
            lines.append(f"ENV PATH={PATH_TAIL} PYTHON_VERSION={sys.version.split()[0]}")
        files: dict[str, bytes | Path] = {
            "cpython.tar": cpython,
            "libpython.tar": _libpython_tar(),
            "history": b"==> init <==\n",
        }
        _build(client, IMAGES[key], "\n".join(lines) + "\n", files)
    return dict(IMAGES)
