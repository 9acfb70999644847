"""A distribution is "the same" by its contents, not its version: a wheel file reinstalled at
the same version with new contents, a new VCS commit and an edit of an editable install (even
one that keeps the files' sizes and times) each make a new layer, and a job runs what the
kernel has installed; a non-editable install from a local folder ships what was installed,
never the folder as it is now. Against a kernel virtualenv, the registry builder and jobs on
local_docker."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.environment.cells import image_with_site, job_log, plan_rows, run_cell
from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.kernel_venv import _project, pip_isolated, with_this_tree
from tests.infra.pypi_index import make_wheel

KEY = """
import sys
from torchx_nb.environment.plan import plan_environment
from torchx_nb.specs.program import CellProgram
from torchx_nb.workspace.builders import RegistryBuilder

b = RegistryBuilder()
image = sys.argv[3]
plan = plan_environment(
    CellProgram(sys.argv[1]), sys.argv[2], image, lambda: b.read_image(image), "auto", False
)
print(plan.key())
"""


@dataclass
class Kernel:
    root: Path
    python: Path

    @property
    def env(self) -> dict[str, str]:
        env = pip_isolated(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(self.root / "links"))
        env.pop("VIRTUAL_ENV", None)
        return with_this_tree(env)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=900,
            check=False,
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "torchx_nb.cli", *args)

    def submit(self, cell: str, image: str, cfg: str) -> str:
        """The log of ``cell`` run on local_docker from this kernel (``--wait``)."""
        ws = self.root / "ws"
        return job_log(self.cli, run_cell(self.cli, ws, image, cfg, cell, "--wait"))

    def pip(self, *args: str) -> None:
        proc = self.run("-m", "pip", "install", "-q", "--no-warn-script-location", *args)
        assert proc.returncode == 0, proc.stderr

    def key(self, cell: str, image: str) -> str:
        proc = self.run("-c", KEY, cell, str(self.root / "ws"), image)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()


@pytest.fixture()
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    (tmp_path / "ws").mkdir()
    (tmp_path / "links").mkdir()
    yield Kernel(tmp_path, venv / "bin" / "python")


def _rewheel(path: Path, body: str) -> None:
    """The same wheel name and version, new contents (a rebuild)."""
    name, version = path.name.split("-")[:2]
    path.unlink()
    make_wheel(path.parent, name, version, body=body)


def test_a_rebuilt_wheel_makes_a_new_layer_and_a_local_folder_ships_what_was_installed(
    kernel: Kernel,
    python_in_registry: str,
    registry: Registry,
    docker_env: DockerDaemon,
) -> None:
    wheel = make_wheel(kernel.root / "files", "tnbw", "1.0", body="one")
    kernel.pip("--no-deps", str(wheel))
    src = _project(kernel.root, "tnbl", "1.0", [], {"tnbl.py": "BODY = 'installed'\n"})
    kernel.pip("--no-deps", "--no-build-isolation", str(src))
    cell = "import tnbw, tnbl\nprint('tnbw', tnbw.BODY, 'tnbl', tnbl.BODY)\n"

    def submit() -> str:
        return kernel.submit(
            cell,
            python_in_registry,
            f"network=host,builder=registry,image_repo={registry.host}/identity",
        )

    first_key = kernel.key(cell, python_in_registry)
    (src / "tnbl.py").write_text("BODY = 'edited, never installed'\n")
    assert "tnbw one tnbl installed" in submit()
    assert kernel.key(cell, python_in_registry) == first_key  # the folder's edit is not it
    _rewheel(wheel, "two")
    kernel.pip("--no-deps", "--force-reinstall", str(wheel))
    assert kernel.key(cell, python_in_registry) != first_key
    assert "tnbw two tnbl installed" in submit()


def test_an_editable_edit_keeping_size_and_times_and_a_new_commit_make_new_keys(
    kernel: Kernel, python_in_registry: str, registry: Registry
) -> None:
    edit = _project(kernel.root, "tnbe", "1.0", [], {"tnbe.py": "BODY = 'aaaa'\n"})
    kernel.pip("--no-deps", "--no-build-isolation", "-e", str(edit))
    repo = _project(kernel.root / "git", "tnbg", "1.0", [], {"tnbg.py": "BODY = 'first'\n"})
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    kernel.pip("--no-deps", "--no-build-isolation", f"git+{repo.as_uri()}")
    cell = "import tnbe, tnbg\n"
    keys = [kernel.key(cell, python_in_registry)]
    assert kernel.key(cell, python_in_registry) == keys[0]  # unchanged: the same key

    module = edit / "tnbe.py"
    st = module.stat()
    module.write_text("BODY = 'bbbb'\n")  # the same size
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same times
    keys.append(kernel.key(cell, python_in_registry))

    (repo / "tnbg.py").write_text("BODY = 'second'\n")
    subprocess.run([*git, "commit", "-q", "-am", "two"], check=True)
    kernel.pip("--no-deps", "--no-build-isolation", "--force-reinstall", f"git+{repo.as_uri()}")
    keys.append(kernel.key(cell, python_in_registry))
    assert len(set(keys)) == 3, keys


def test_an_index_wheel_is_known_by_its_hash(tmp_path: Path) -> None:
    """The identity of a wheel an index serves is its sha256 from the index's pages (here a
    find-links folder, whose files are read): a same-version rebuild is another identity."""
    from torchx_nb.environment.identity import served_identity
    from torchx_nb.environment.index import IndexSettings
    from torchx_nb.environment.index_pages import fitting, listings
    from torchx_nb.workspace.image_contents import ImageContents

    wheel = make_wheel(tmp_path / "links", "tnbh", "1.0", body="one")
    settings = IndexSettings(no_index=True, find_links=(str(tmp_path / "links"),))

    def identity() -> str:
        image = ImageContents("3.11", "/usr", ("/usr/lib/python3/dist-packages",), glibc="2.17")
        found = fitting(listings(settings, "tnbh"), "1.0", image)
        assert [f.filename for f in found] == [wheel.name]
        return served_identity(found)

    first = identity()
    _rewheel(wheel, "two")
    with zipfile.ZipFile(wheel) as zf:
        assert b"two" in zf.read("tnbh.py")
    assert identity() != first


@pytest.mark.parametrize("installed", ["file", "index"])
def test_the_image_s_copy_at_the_same_version_with_other_contents_is_replaced(
    kernel: Kernel, docker_env: DockerDaemon, base_images: dict[str, str], installed: str
) -> None:
    """The image has tnbw 1.0 as published; the kernel has its own build of tnbw 1.0 (a
    wheel file, or a pure wheel from its index): the same version is not the same
    distribution, so the plan adds the kernel's and the job runs it."""
    published = make_wheel(kernel.root / "published", "tnbw", "1.0", body="published")
    site = kernel.root / "image-site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(published),
        ],
        check=True,
        env=pip_isolated(),
    )
    image = image_with_site(
        docker_env.client(),
        base_images["python"],
        site,
        f"localhost/torchx-nb-test/python-tnbw-{installed}:1",
    )
    if installed == "file":
        kernel.pip("--no-deps", str(make_wheel(kernel.root / "ours", "tnbw", "1.0", body="ours")))
    else:  # the kernel's find-links index serves its build
        make_wheel(kernel.root / "links", "tnbw", "1.0", body="ours")
        kernel.pip("--no-deps", "tnbw==1.0")
    cell = "import tnbw\nprint('tnbw', tnbw.BODY)\n"
    ws, cfg = kernel.root / "ws", "network=host,builder=docker"
    plan = run_cell(kernel.cli, ws, image, cfg, cell, "--dryrun", "--json")
    assert plan.returncode == 0, plan.stderr
    assert "image has 1.0 with other contents" in plan_rows(plan.stdout)["tnbw"], plan.stdout
    assert "tnbw ours" in kernel.submit(cell, image, cfg)


def test_an_editable_install_in_a_folder_with_a_space_ships_and_follows_its_edits(
    kernel: Kernel, python_in_registry: str, registry: Registry, docker_env: DockerDaemon
) -> None:
    """pip records an editable install's folder as a file URL, percent-encoded
    (``file:///…/My%20Projects/tnbsp``): that is the folder ``/…/My Projects/tnbsp``. It
    ships as a build of that folder, and an edit of it makes a new layer (the encoded path
    was taken as the folder: 'whose source folder … is gone', and no folder to hash)."""
    from tests.infra.kernel_venv import download_wheels

    download_wheels(kernel.root / "links", "setuptools>=61")  # uv build's backend
    edit = _project(kernel.root / "My Projects", "tnbsp", "1.0", [], {"tnbsp.py": "B = 'one'\n"})
    kernel.pip("--no-deps", "--no-build-isolation", "-e", str(edit))
    cell = "import tnbsp\nprint('tnbsp', tnbsp.B)\n"

    def submit() -> str:
        return kernel.submit(
            cell,
            python_in_registry,
            f"network=host,builder=registry,image_repo={registry.host}/identity-space",
        )

    first = kernel.key(cell, python_in_registry)
    assert "tnbsp one" in submit()
    (edit / "tnbsp.py").write_text("B = 'two'\n")
    assert kernel.key(cell, python_in_registry) != first
    assert "tnbsp two" in submit()


def test_installer_files_are_not_contents() -> None:
    """uv writes ``uv_cache.json`` into the dist-info of a wheel installed from a local file
    (pip does not): the same wheel's files installed by either are the same distribution,
    in an image's RECORD as in the kernel's, and such a copy is not 'other contents'."""
    from torchx_nb.workspace.image_contents import record_identity

    by_pip = (
        "tnbsx-1.0.dist-info/INSTALLER,sha256=zuuue4knoyJ-UwPPXg8fezS7VCrXJQrAP7zeNuwvFQg,4\n"
        "tnbsx-1.0.dist-info/METADATA,sha256=4ywHThmkvci32Zfe7AnHQZ_P7G2L5a4r3vH2I3yF5VQ,47\n"
        "tnbsx-1.0.dist-info/RECORD,,\n"
        "tnbsx.py,sha256=cWlBJwPD7b8t58Lc0fsUdt6pHXyVFiHrLjt5wGo9F04,4\n"
    )
    by_uv = (
        "tnbsx-1.0.dist-info/INSTALLER,sha256=5hhM4Q4mYTT9z6QB6PGpUAW81PGNFrYrdXMj4oM_6ak,2\n"
        "tnbsx-1.0.dist-info/METADATA,sha256=4ywHThmkvci32Zfe7AnHQZ_P7G2L5a4r3vH2I3yF5VQ,47\n"
        "tnbsx-1.0.dist-info/RECORD,,\n"
        "tnbsx-1.0.dist-info/uv_cache.json,sha256=fa9rFsDeYZNbxQCkG96UXmIK3EVlLsSARcGcdOREKrg,127\n"
        "tnbsx.py,sha256=cWlBJwPD7b8t58Lc0fsUdt6pHXyVFiHrLjt5wGo9F04,4\n"
    )
    assert record_identity(by_pip) == record_identity(by_uv) != ""
    other = by_uv.replace("cWlBJwPD7b8t58Lc0fsUdt6pHXyVFiHrLjt5wGo9F04", "x" * 43)
    assert record_identity(other) != record_identity(by_pip)


def test_an_edit_in_a_subpackage_named_build_or_dist_makes_a_new_key(
    kernel: Kernel, python_in_registry: str, registry: Registry
) -> None:
    """An editable install's package may hold subpackages named like build artefacts
    (``tnbsub/build``, ``tnbsub/dist``): they are the package's source, built into its wheel,
    so an edit of them is a new layer (only the folder's own ``build/`` and ``dist/`` are
    artefacts)."""
    edit = _project(
        kernel.root,
        "tnbsub",
        "1.0",
        [],
        {
            "tnbsub/__init__.py": "",
            "tnbsub/build/__init__.py": "BODY = 'one'\n",
            "tnbsub/dist/__init__.py": "BODY = 'one'\n",
            "build/lib/tnbsub/__init__.py": "# an artefact of an earlier build\n",
        },
    )
    pyproject = (edit / "pyproject.toml").read_text()
    (edit / "pyproject.toml").write_text(
        pyproject.replace(
            'py-modules = ["tnbsub"]', 'packages = ["tnbsub", "tnbsub.build", "tnbsub.dist"]'
        )
    )
    kernel.pip("--no-deps", "--no-build-isolation", "-e", str(edit))
    cell = "import tnbsub.build, tnbsub.dist\n"
    keys = [kernel.key(cell, python_in_registry)]
    (edit / "build" / "lib" / "tnbsub" / "__init__.py").write_text("# another artefact\n")
    assert kernel.key(cell, python_in_registry) == keys[0]  # the folder's build/ is not it
    (edit / "tnbsub" / "build" / "__init__.py").write_text("BODY = 'two'\n")
    keys.append(kernel.key(cell, python_in_registry))
    (edit / "tnbsub" / "dist" / "__init__.py").write_text("BODY = 'two'\n")
    keys.append(kernel.key(cell, python_in_registry))
    assert len(set(keys)) == 3, keys


def test_an_index_copy_with_scripts_is_the_kernel_s_build() -> None:
    """uv's install into a folder lists a console script as ``bin/tnbes`` (its first line
    names the interpreter) and adds uv_cache.json; pip's, in the kernel, as
    ``../../../bin/tnbes``: the same wheel, so not another build (it was, and every
    distribution with a script shipped the kernel's copy instead of the index's wheel).
    Another module file is another build."""
    from torchx_nb.environment.identity import records_differ

    kernel = (
        "../../../bin/tnbes,sha256=wU0GXVZYGdmLstextjwYw2FVPPq_q0veqbl1KZ8TIeA,213\n"
        "__pycache__/tnbes.cpython-311.pyc,,\n"
        "tnbes-1.0.dist-info/INSTALLER,sha256=zuuue4knoyJ-UwPPXg8fezS7VCrXJQrAP7zeNuwvFQg,4\n"
        "tnbes-1.0.dist-info/entry_points.txt,sha256=fg1hbOo89UUW-km1RyHFAaOCmrvjXZnEPjWnw9yoShw,37\n"
        "tnbes-1.0.dist-info/RECORD,,\n"
        "tnbes.py,sha256=dibFddj8dvUNAL_XrA2tUSOVhgv_-4mG6xDFlEtg_AQ,21\n"
    )
    served = (
        "bin/tnbes,sha256=moh-XtHJGeul-YB_2ZkOj6QTIfWL7IGxefPY06VSpPQ,304\n"
        "tnbes-1.0.dist-info/INSTALLER,sha256=5hhM4Q4mYTT9z6QB6PGpUAW81PGNFrYrdXMj4oM_6ak,2\n"
        "tnbes-1.0.dist-info/entry_points.txt,sha256=fg1hbOo89UUW-km1RyHFAaOCmrvjXZnEPjWnw9yoShw,37\n"
        "tnbes-1.0.dist-info/RECORD,,\n"
        "tnbes-1.0.dist-info/uv_cache.json,sha256=5qvx8pdP4_wGZHnj_ASJGUhAQCHdNrc45bAe-qtjwkQ,126\n"
        "tnbes.py,sha256=dibFddj8dvUNAL_XrA2tUSOVhgv_-4mG6xDFlEtg_AQ,21\n"
    )
    assert not records_differ(kernel, served)
    rebuilt = served.replace("dibFddj8dvUNAL_XrA2tUSOVhgv_-4mG6xDFlEtg_AQ", "x" * 43)
    assert records_differ(kernel, rebuilt)


def test_a_same_size_edit_with_its_old_times_is_new_contents_within_one_kernel(
    tmp_path: Path,
) -> None:
    """A kernel lives across submits, and the file digests it computed are kept: a same-size
    edit whose times were put back (cp -p, rsync -t, tar) kept its old digest, so the second
    submit's editable folder (and a local wheel file) had the first's identity — the cached
    layer, the old code. (The test above runs each submit in a new process and cannot see
    it.) The stamp now holds the file's ctime and inode, which no tool puts back."""
    import hashlib
    import time

    from torchx_nb.environment.identity import file_digest, folder_identity

    project = tmp_path / "proj"
    project.mkdir()
    module = project / "tnbsame.py"
    module.write_text("BODY = 'aaaa'\n")
    first = folder_identity(project)
    assert folder_identity(project) == first  # unchanged: the same identity
    st = module.stat()
    time.sleep(0.05)  # file times move by the kernel's clock tick
    module.write_text("BODY = 'bbbb'\n")  # the same size
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same times
    assert (module.stat().st_size, module.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert folder_identity(project) != first
    assert file_digest(module) == hashlib.sha256(b"BODY = 'bbbb'\n").hexdigest()
