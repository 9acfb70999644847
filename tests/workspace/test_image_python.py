"""Which Python a job on an image runs, read from the image's layers and config: Debian's
python3 (merged /usr), a /usr/local build as the official images have it, a virtualenv on
PATH over Debian's python3, conda, and an image where nothing on PATH runs Python."""

from __future__ import annotations

from tests.workspace.test_image_contents import Link, _layer, _meta
from torchx_nb.workspace.image_contents import ImageContents, scan_layers

DEBIAN = {
    "bin": Link("usr/bin"),
    "usr/bin/python3.11": b"ELF",
    "usr/bin/python3": Link("python3.11"),
    "usr/lib/python3.11/os.py": b"",
    "usr/lib/python3/dist-packages/": None,
    "usr/lib/python3/dist-packages/numpy-1.24.2.egg-info": _meta("numpy", "1.24.2"),
}
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _scan(*layers: dict[str, bytes | Link | None], env: list[str] | None = None) -> ImageContents:
    return scan_layers([_layer(files) for files in layers], env=env)


def test_debian_s_python3_with_merged_usr_and_no_python_command() -> None:
    c = _scan(DEBIAN, env=["PATH=/bin"])
    assert (c.python, c.prefix, c.site_dir) == ("3.11", "/usr", "/usr/lib/python3/dist-packages")
    assert c.python_path == "/bin/python3"
    assert c.describe_python() == (
        "/bin/python3 (no `python` on the image's PATH; `python3` is /bin/python3 ->"
        " /usr/bin/python3.11, the system's python3, Python 3.11); packages go to"
        " /usr/lib/python3/dist-packages"
    )
    assert c.distributions == {"numpy": "1.24.2"}


def test_a_usr_local_python_as_the_official_images_have_it_wins_on_path() -> None:
    local = {
        "usr/local/bin/python3.12": b"ELF",
        "usr/local/bin/python3": Link("python3.12"),
        "usr/local/bin/python": Link("python3"),
        "usr/local/lib/python3.12/os.py": b"",
        "usr/local/lib/python3.12/site-packages/": None,
        "usr/local/lib/python3.12/site-packages/pip-24.0.dist-info/METADATA": _meta("pip", "24"),
    }
    c = _scan(DEBIAN, local, env=[PATH])
    assert (c.python, c.prefix) == ("3.12", "/usr/local")
    assert c.site_dir == "/usr/local/lib/python3.12/site-packages"
    assert c.distributions == {"pip": "24"}  # Debian's numpy is another Python's
    assert c.python_why == (
        "`python` on the image's PATH is /usr/local/bin/python -> /usr/local/bin/python3.12,"
        " an installation in /usr/local, Python 3.12"
    )


def test_a_virtualenv_on_path_is_the_python_and_its_site_packages_take_the_layer() -> None:
    venv = {
        "opt/venv/pyvenv.cfg": b"home = /usr/bin\ninclude-system-site-packages = false\n"
        b"version = 3.11.2\n",
        "opt/venv/bin/python": Link("/usr/bin/python3"),
        "opt/venv/bin/python3": Link("python"),
        "opt/venv/lib/python3.11/site-packages/": None,
        "opt/venv/lib/python3.11/site-packages/tqdm-4.66.1.dist-info/METADATA": _meta(
            "tqdm", "4.66.1"
        ),
    }
    c = _scan(DEBIAN, venv, env=["PATH=/opt/venv/bin:/usr/bin:/bin", "VIRTUAL_ENV=/opt/venv"])
    assert (c.python, c.prefix, c.python_path) == ("3.11", "/opt/venv", "/opt/venv/bin/python")
    assert c.site_dir == "/opt/venv/lib/python3.11/site-packages"
    assert c.distributions == {"tqdm": "4.66.1"}  # the system's numpy is not on its path
    assert c.python_why == (
        "`python` on the image's PATH is /opt/venv/bin/python -> /usr/bin/python3.11, a"
        " virtualenv (/opt/venv/pyvenv.cfg) (VIRTUAL_ENV names it too) of Python 3.11"
    )
    system = {
        **venv,
        "opt/venv/pyvenv.cfg": b"home = /usr/bin\ninclude-system-site-packages = true\n",
    }
    c = _scan(DEBIAN, system, env=["PATH=/opt/venv/bin:/usr/bin"])
    assert c.distributions == {"tqdm": "4.66.1", "numpy": "1.24.2"}
    assert c.site_dir == "/opt/venv/lib/python3.11/site-packages"
    # the same venv off PATH: the system's python3 runs
    off = _scan(DEBIAN, venv, env=["PATH=/usr/bin:/bin"])
    assert (off.prefix, off.site_dir) == ("/usr", "/usr/lib/python3/dist-packages")


def test_a_conda_prefix_on_path_is_named_and_a_later_whiteout_removes_it() -> None:
    conda = {
        "opt/conda/conda-meta/": None,
        "opt/conda/conda-meta/history": b"",
        "opt/conda/bin/python3.11": b"ELF",
        "opt/conda/bin/python": Link("python3.11"),
        "opt/conda/lib/python3.11/os.py": b"",
        "opt/conda/lib/python3.11/site-packages/": None,
    }
    env = ["PATH=/opt/conda/bin:/usr/local/bin:/usr/bin:/bin"]
    c = _scan(DEBIAN, conda, env=env)
    assert (c.prefix, c.site_dir) == ("/opt/conda", "/opt/conda/lib/python3.11/site-packages")
    assert "a conda environment (/opt/conda/conda-meta), Python 3.11" in c.python_why
    gone = _scan(DEBIAN, conda, {"opt/.wh.conda": b""}, env=env)
    assert gone.prefix == "/usr"


def test_an_image_whose_python_cannot_be_told_says_what_was_tried() -> None:
    stray = {"opt/py/lib/python3.11/os.py": b"", "opt/py/bin/python3.11": b"ELF"}
    c = _scan(stray, env=["PATH=/usr/bin:/bin"])
    assert c.python is None and c.site_dirs == ()
    assert c.describe_python() == (
        "no python or python3 on the image's PATH /usr/bin:/bin; a standard library is at"
        " /opt/py/lib/python3.11 but no command on PATH runs it"
    )
    broken = {"usr/local/bin/python": Link("python3.9"), "usr/local/bin/python3.9": b"ELF"}
    c = _scan(broken)
    assert c.python is None and c.python_why == (
        "`python` on the image's PATH is /usr/local/bin/python -> /usr/local/bin/python3.9,"
        " but no standard library (/usr/local/lib/python3.N/os.py) is beside it"
    )
    assert _scan({"bin/sh": b""}).describe_python() == "no Python 3 in the image"


def test_the_full_version_is_the_one_the_image_s_config_declares_for_its_python() -> None:
    """``PYTHON_VERSION`` (the official images set it) gives markers the image's patch
    release; one naming another Python than the one found is not taken."""
    local = {
        "usr/local/bin/python3.12": b"ELF",
        "usr/local/bin/python": Link("python3.12"),
        "usr/local/lib/python3.12/os.py": b"",
    }
    assert _scan(local, env=[PATH, "PYTHON_VERSION=3.12.4"]).python_full == "3.12.4"
    assert _scan(local, env=[PATH, "PYTHON_VERSION=3.11.9"]).python_full is None
    assert _scan(local, env=[PATH]).python_full is None
