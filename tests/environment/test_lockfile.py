"""``--packages FILE`` read in full: a uv.lock evaluated for the image (markers, the right
fork, a dependency's extras, the project's extras and groups only when asked, the project
itself built from its folder); a requirements file's includes, constraints, local folders,
hashes and markers, and one line for what it cannot honour; a dry run resolves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchx_nb.environment.index import IndexSettings
from torchx_nb.environment.lockfile import FilePin
from torchx_nb.environment.requirements import check_packages_option, pins_from_file
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.image_contents import ImageContents

LOCK = """version = 1
requires-python = ">=3.8"
resolution-markers = ["python_full_version >= '3.10'", "python_full_version < '3.10'"]

[[package]]
name = "app"
version = "0.3.0"
source = { editable = "." }
dependencies = [
    { name = "colorama", marker = "sys_platform == 'win32'" },
    { name = "requests", extra = ["socks"] },
    { name = "tabulate", version = "0.8.10", source = { registry = "https://i/simple" }, marker = "python_full_version < '3.10'" },
    { name = "tabulate", version = "0.9.0", source = { registry = "https://i/simple" }, marker = "python_full_version >= '3.10'" },
]

[package.optional-dependencies]
gpu = [{ name = "numpy" }]

[package.dev-dependencies]
dev = [{ name = "pytest" }]

[[package]]
name = "colorama"
version = "0.4.6"
source = { registry = "https://i/simple" }

[[package]]
name = "numpy"
version = "2.1.0"
source = { registry = "https://i/simple" }

[[package]]
name = "pysocks"
version = "1.7.1"
source = { registry = "https://i/simple" }

[[package]]
name = "pytest"
version = "8.3.0"
source = { registry = "https://i/simple" }

[[package]]
name = "requests"
version = "2.32.3"
source = { registry = "https://i/simple" }
dependencies = [{ name = "urllib3" }]

[package.optional-dependencies]
socks = [{ name = "pysocks" }]

[[package]]
name = "tabulate"
version = "0.8.10"
source = { registry = "https://i/simple" }

[[package]]
name = "tabulate"
version = "0.9.0"
source = { registry = "https://i/simple" }

[[package]]
name = "urllib3"
version = "2.2.2"
source = { registry = "https://i/simple" }
"""


def _image(python: str) -> ImageContents:
    return ImageContents(python, "/usr", ())


def _names(pins: list[FilePin]) -> list[tuple[str, str]]:
    return sorted((p.name, p.version) for p in pins)


def test_a_uv_lock_is_evaluated_for_the_image_s_python_and_platform(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(LOCK)
    pins = pins_from_file(str(lock), _image("3.11"), IndexSettings())
    assert _names(pins) == [
        ("app", "0.3.0"),
        ("pysocks", "1.7.1"),
        ("requests", "2.32.3"),
        ("tabulate", "0.9.0"),
        ("urllib3", "2.2.2"),
    ]
    (project,) = [p for p in pins if p.folder]
    assert (project.name, project.folder) == ("app", str(tmp_path.resolve()))
    old = pins_from_file(str(lock), _image("3.9"), IndexSettings())
    assert ("tabulate", "0.8.10") in _names(old) and ("tabulate", "0.9.0") not in _names(old)
    asked = check_packages_option(f"{lock}[gpu,dev]")
    full = _names(pins_from_file(asked, _image("3.11"), IndexSettings()))
    assert ("numpy", "2.1.0") in full and ("pytest", "8.3.0") in full
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(f"{lock}[docs]", _image("3.11"), IndexSettings())
    assert str(e.value) == (
        f"--packages {lock}[docs]: docs is neither an extra nor a dependency group of app"
        " (it has: dev, gpu)"
    )


def test_one_version_locked_from_two_indexes_is_told_apart_by_its_source(
    tmp_path: Path,
) -> None:
    """A lock that takes one version of a package from two indexes, by platform (a CPU and
    a CUDA index, as uv's sources with markers write it): uv names the source in each
    dependency, and the two packages differ only by it. That was 'the lock names torch 2.5.1
    more than once: run uv lock again' (false); the dependency's source picks the package."""
    cpu, cuda = "https://cpu.example/simple", "https://cuda.example/simple"
    lock = tmp_path / "uv.lock"
    lock.write_text(
        'version = 1\nrequires-python = ">=3.8"\n\n[[package]]\nname = "app"\nversion = "0.1"\n'
        'source = { virtual = "." }\ndependencies = [\n'
        f'    {{ name = "torch", version = "2.5.1", source = {{ registry = "{cpu}" }},'
        " marker = \"sys_platform == 'darwin'\" },\n"
        f'    {{ name = "torch", version = "2.5.1", source = {{ registry = "{cuda}" }},'
        " marker = \"sys_platform == 'linux'\" },\n]\n\n"
        f'[[package]]\nname = "torch"\nversion = "2.5.1"\nsource = {{ registry = "{cpu}" }}\n'
        'wheels = [{ url = "https://cpu.example/torch-2.5.1-cp311-none-macosx_11_0_arm64.whl",'
        f' hash = "sha256:{"a" * 64}" }}]\n\n'
        f'[[package]]\nname = "torch"\nversion = "2.5.1"\nsource = {{ registry = "{cuda}" }}\n'
        'wheels = [{ url = "https://cuda.example/torch-2.5.1-cp311-cp311-linux_x86_64.whl",'
        f' hash = "sha256:{"b" * 64}" }}]\n'
    )
    (pin,) = pins_from_file(str(lock), _image("3.11"), IndexSettings())
    assert (pin.name, pin.version, pin.hashes) == ("torch", "2.5.1", (f"sha256:{'b' * 64}",))


def test_a_url_source_s_wheel_is_the_one_tagged_for_the_image(tmp_path: Path) -> None:
    """A lock's url source listing wheels for several platforms: the one fetched is the one
    the image's Python and platform accept (the first listed was taken, a macOS wheel for a
    Linux image, and failed at install), else its sdist."""
    base = "https://files.example/tnburl"
    mac = f"{base}/tnburl-1.0-cp311-cp311-macosx_11_0_arm64.whl"
    linux = f"{base}/tnburl-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"

    def lock_with(*files: str, sdist: bool = False) -> Path:
        lock = tmp_path / "uv.lock"
        wheels = ", ".join(f'{{ url = "{u}", hash = "sha256:{"c" * 64}" }}' for u in files)
        lock.write_text(
            'version = 1\nrequires-python = ">=3.8"\n\n[[package]]\nname = "app"\n'
            'version = "0.1"\nsource = { virtual = "." }\n'
            'dependencies = [{ name = "tnburl" }]\n\n'
            f'[[package]]\nname = "tnburl"\nversion = "1.0"\nsource = {{ url = "{mac}" }}\n'
            f"wheels = [{wheels}]\n"
            + (
                f'sdist = {{ url = "{base}/tnburl-1.0.tar.gz", hash = "sha256:{"d" * 64}" }}\n'
                if sdist
                else ""
            )
        )
        return lock

    image = ImageContents("3.11", "/usr/local", (), glibc="2.36")
    (pin,) = pins_from_file(str(lock_with(mac, linux)), image, IndexSettings(), resolve=False)
    assert pin.direct is not None and pin.direct.url == linux
    (pin,) = pins_from_file(str(lock_with(mac, sdist=True)), image, IndexSettings(), resolve=False)
    assert pin.direct is not None and pin.direct.url == f"{base}/tnburl-1.0.tar.gz"


def test_python_full_version_is_the_image_s_own_or_this_kernel_s_never_x_y_0(
    tmp_path: Path,
) -> None:
    """A fork on a patch release (``python_full_version < '3.11.4'``) was evaluated for
    3.11.0 whatever the image ran. It takes the image's declared version, this kernel's
    when no image was read, and is one line when the image does not say it; a marker that
    holds at every patch release needs no full version (the lock above)."""
    import platform

    lock = tmp_path / "uv.lock"
    lock.write_text(
        'version = 1\nrequires-python = ">=3.8"\n\n[[package]]\nname = "app"\nversion = "0.1"\n'
        'source = { virtual = "." }\ndependencies = [\n'
        '    { name = "tnbfork", version = "1.0", source = { registry = "https://i/simple" },'
        " marker = \"python_full_version < '3.11.4'\" },\n"
        '    { name = "tnbfork", version = "2.0", source = { registry = "https://i/simple" },'
        " marker = \"python_full_version >= '3.11.4'\" },\n]\n\n"
        '[[package]]\nname = "tnbfork"\nversion = "1.0"\nsource = { registry = "https://i/simple" }\n\n'
        '[[package]]\nname = "tnbfork"\nversion = "2.0"\nsource = { registry = "https://i/simple" }\n'
    )

    def picked(contents: ImageContents | None) -> list[tuple[str, str]]:
        return _names(pins_from_file(str(lock), contents, IndexSettings()))

    declared = ImageContents("3.11", "/usr/local", (), python_full="3.11.7")
    assert picked(declared) == [("tnbfork", "2.0")]
    assert picked(ImageContents("3.11", "/usr/local", (), python_full="3.11.2")) == [
        ("tnbfork", "1.0")
    ]
    kernel = "2.0" if tuple(map(int, platform.python_version_tuple())) >= (3, 11, 4) else "1.0"
    assert picked(None) == [("tnbfork", kernel)]
    with pytest.raises(TorchxNbError) as e:
        picked(_image("3.11"))
    assert str(e.value) == (
        f"--packages {lock}: the marker \"python_full_version < '3.11.4'\" depends on the"
        " image's Python patch version, which the image does not say (Python 3.11; its config"
        " has no PYTHON_VERSION): set ENV PYTHON_VERSION=3.11.N in the image, or write the"
        " marker with python_version"
    )
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("tnbfork==2.0; python_full_version >= '3.11.4'\n")
    dry = pins_from_file(str(reqs), declared, IndexSettings(), resolve=False)
    assert _names(dry) == [("tnbfork", "2.0")]
    older = ImageContents("3.11", "/usr/local", (), python_full="3.11.2")
    assert pins_from_file(str(reqs), older, IndexSettings(), resolve=False) == []


def test_a_marker_on_one_patch_release_is_one_line_when_the_image_does_not_say_its_own(
    tmp_path: Path,
) -> None:
    """Without the image's full version a marker was evaluated at X.Y.0 and X.Y.999 only:
    ``python_full_version == '3.11.7'`` (or ``!=``, ``===``, ``in``) gave the same answer at
    both, so it was taken as false (or true) on any 3.11 — on a 3.11.7 image the dependency
    was silently dropped (or kept). It is the one line, as a patch range is; a marker that
    holds at every patch release still needs no full version."""
    from packaging.markers import Marker

    reqs = tmp_path / "requirements.txt"
    image = _image("3.11")
    for marker in (
        "python_full_version == '3.11.7'",
        "python_full_version != '3.11.7'",
        "python_full_version === '3.11.7'",
        "python_full_version in '3.11.7 3.11.8'",
        "implementation_version == '3.11.12'",
    ):
        reqs.write_text(f"tnbpatch==1.0; {marker}\n")
        with pytest.raises(TorchxNbError) as e:
            pins_from_file(str(reqs), image, IndexSettings(), resolve=False)
        shown = repr(str(Marker(marker)))  # as packaging writes it back
        assert str(e.value).startswith(
            f"--packages {reqs}: the marker {shown} depends on the image's Python patch"
            " version, which the image does not say"
        ), marker
    for marker, holds in (
        ("python_full_version == '3.11.*'", True),
        ("python_full_version >= '3.11'", True),
        ("python_full_version == '3.10.7'", False),
        ("python_full_version < '3.12'", True),
    ):
        reqs.write_text(f"tnbpatch==1.0; {marker}\n")
        got = pins_from_file(str(reqs), image, IndexSettings(), resolve=False)
        assert _names(got) == ([("tnbpatch", "1.0")] if holds else []), marker
    declared = ImageContents("3.11", "/usr/local", (), python_full="3.11.7")
    reqs.write_text("tnbpatch==1.0; python_full_version == '3.11.7'\n")
    assert _names(pins_from_file(str(reqs), declared, IndexSettings(), resolve=False)) == [
        ("tnbpatch", "1.0")
    ]


def test_a_requirements_file_keeps_every_line_or_names_the_one_it_cannot_honour(
    tmp_path: Path,
) -> None:
    for name in ("pkg_a", "pkg_b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pyproject.toml").write_text(
            f'[project]\nname = "{name.replace("_", "-")}"\nversion = "1.2"\n'
        )
    (tmp_path / "base.txt").write_text("tnbserved>=0.9 \\\n    --hash=sha256:abc\n")
    (tmp_path / "pins.txt").write_text("tnbserved==0.9\n")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(
        "# the app\n-r base.txt\n-c pins.txt\n-e ./pkg_a\n./pkg_b  # plain path\n"
        "tnbdep==1.0 ; python_version >= '3'\ncolorama ; sys_platform == 'win32'\n"
    )
    dry = pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert [(p.name, p.version, p.folder, p.note) for p in dry] == [
        ("tnbserved", "(at submit)", None, ">=0.9, resolved at submit"),
        ("tnbdep", "1.0", None, "==1.0, resolved at submit"),
        ("pkg-a", "1.2", str(tmp_path / "pkg_a"), f"built from {tmp_path / 'pkg_a'}"),
        ("pkg-b", "1.2", str(tmp_path / "pkg_b"), f"built from {tmp_path / 'pkg_b'}"),
    ]
    for line, message in [
        (
            "--index-url http://127.0.0.1/simple",
            f"--packages {reqs}:1: the option '--index-url' is not honoured here: set indexes"
            " in pip's configuration (the environment layer uses it)",
        ),
        ("./nowhere", f"--packages {reqs}:1: './nowhere' is not a folder to build a wheel from"),
    ]:
        reqs.write_text(line + "\n")
        with pytest.raises(TorchxNbError) as e:
            pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
        assert str(e.value) == message


def test_a_folder_named_by_a_file_url_is_the_folder_it_names(tmp_path: Path) -> None:
    """``file:`` URLs are percent-encoded (pip writes them so): ``file:///…/my%20pkg`` is the
    folder ``/…/my pkg`` (it was taken as the folder ``my%20pkg``, which is not there)."""
    folder = tmp_path / "my pkg"
    folder.mkdir()
    (folder / "pyproject.toml").write_text('[project]\nname = "pkg-c"\nversion = "1.0"\n')
    reqs = tmp_path / "requirements.txt"
    for line in (folder.as_uri(), f"pkg-c @ {folder.as_uri()}", f"-e {folder.as_uri()}"):
        reqs.write_text(line + "\n")
        pins = pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
        assert [(p.name, p.folder) for p in pins] == [("pkg-c", str(folder))], line


def test_a_requirements_file_is_read_as_pip_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's ``${NAME}`` variables, an ``-r`` cycle named as one, and a line's number in the
    file after a continuation (URL and VCS lines: the test below)."""
    monkeypatch.setenv("TNB_VERSION", "1.0")
    monkeypatch.setenv("TNB_DIR", "sub")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.txt").write_text("tnbdep==${TNB_VERSION}\n")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("-r ${TNB_DIR}/base.txt\ntnbserved==${TNB_VERSION}\n")
    dry = pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert [(p.name, p.version) for p in dry] == [("tnbdep", "1.0"), ("tnbserved", "1.0")]
    (tmp_path / "a.txt").write_text("-r requirements.txt\n")
    for text, message in [
        (
            "tnbdep==1.0 \\\n  --hash=sha256:abc \\\n  --hash=sha256:def\ntnbx==\n",
            f"--packages {reqs}:4: 'tnbx==' is not a requirement (Expected semicolon (after"
            " name with no version specifier) or end)",
        ),
        (
            "-r a.txt\n",
            f"--packages: {tmp_path / 'a.txt'} includes {reqs} again (requirements.txt ->"
            " a.txt -> requirements.txt): remove that -r or -c",
        ),
    ]:
        reqs.write_text(text)
        with pytest.raises(TorchxNbError) as e:
            pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
        assert str(e.value) == message
        assert "t0ken" not in str(e.value) and "\n" not in str(e.value)


def test_once_one_line_has_a_hash_every_resolved_distribution_needs_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's hash-checking mode: a dependency resolved at submit without a hash is one line
    (the resolution itself, uv pip compile, is faked here; the jobs test runs it)."""
    from torchx_nb.environment import requirements
    from torchx_nb.environment.lockfile import FilePin

    reqs = tmp_path / "requirements.txt"
    reqs.write_text("tnbprobe==1.0 --hash=sha256:AB12\n")
    resolved = [FilePin("tnbprobe", "1.0"), FilePin("tnbdep", "1.0")]
    monkeypatch.setattr(requirements, "_compile", lambda *a: list(resolved))
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(str(reqs), _image("3.11"), IndexSettings())
    assert str(e.value) == (
        f"--packages {reqs}: some lines have --hash and tnbdep has none (pip's hash-checking"
        " mode needs one for every distribution): add them (uv pip compile"
        " --generate-hashes), or remove every --hash"
    )
    reqs.write_text("tnbprobe==1.0 --hash=sha256:AB12\n-c pins.txt\n")
    (tmp_path / "pins.txt").write_text("tnbdep==1.0 --hash=sha256:cd34\n")
    pins = pins_from_file(str(reqs), _image("3.11"), IndexSettings())
    assert [(p.name, p.hashes) for p in pins] == [
        ("tnbprobe", ("sha256:ab12",)),
        ("tnbdep", ("sha256:cd34",)),
    ]


def test_url_and_vcs_lines_are_listed_for_submit_with_credentials_masked(tmp_path: Path) -> None:
    """A bare VCS line (``#egg=``), ``name @ URL`` lines (a wheel: its version from the file
    name), a marker that does not hold on the image, a local wheel file: a dry run lists
    them to be fetched at submit, credentials masked (they were one refusal each)."""
    wheel = tmp_path / "tnbw-2.0-py3-none-any.whl"
    wheel.write_bytes(b"not fetched in a dry run")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(
        "git+https://alice:t0ken@127.0.0.1/r.git@v1#egg=tnbx\n"
        "tnby @ https://alice:t0k@n@127.0.0.1/x/tnby-1.0-py3-none-any.whl\n"
        "tnbz @ git+https://127.0.0.1/z.git ; sys_platform == 'win32'\n"
        f"./{wheel.name}\n"
    )
    dry = pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert [(p.name, p.version, p.folder, p.note) for p in dry] == [
        (
            "tnbx",
            "(at submit)",
            None,
            "from git+https://****@127.0.0.1/r.git@v1, fetched at submit",
        ),
        (
            "tnby",
            "1.0",
            None,
            "from https://****@127.0.0.1/x/tnby-1.0-py3-none-any.whl, fetched at submit",
        ),
        ("tnbw", "2.0", None, f"from {wheel.as_uri()}, fetched at submit"),
    ]
    assert "t0k" not in repr(dry[0].note) + repr(dry[1].note)


def test_a_fetched_file_is_known_by_its_sha256_and_a_wrong_hash_is_one_line(
    tmp_path: Path,
) -> None:
    """Two wheel files of the same name and version with other contents are two
    identities (a rebuild is a new layer); a ``--hash`` the file does not have is refused."""
    from tests.infra.pypi_index import make_wheel
    from torchx_nb.environment.direct import DirectRef
    from torchx_nb.environment.requirements import _fetched_pin

    one = make_wheel(tmp_path / "a", "tnbw", "2.0", body="one")
    two = make_wheel(tmp_path / "b", "tnbw", "2.0", body="two")
    pins = [_fetched_pin(DirectRef(None, w.as_uri()), "r.txt", IndexSettings()) for w in (one, two)]
    assert [(p.name, p.version, p.folder) for p in pins] == [
        ("tnbw", "2.0", str(one)),
        ("tnbw", "2.0", str(two)),
    ]
    assert pins[0].identity.startswith("sha256:") and pins[0].identity != pins[1].identity
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(f"{one} --hash=sha256:{'0' * 64}\n")
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(str(reqs), _image("3.11"), IndexSettings())
    assert str(e.value).startswith(f"--packages {reqs}: {one.as_uri()} is a file with sha256 ")


def test_a_lock_s_git_and_url_sources_are_fetched_at_submit(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(
        'version = 1\n[[package]]\nname = "app"\nversion = "1"\nsource = { virtual = "." }\n'
        'dependencies = [{ name = "tnbg" }, { name = "tnbu" }]\n'
        '[[package]]\nname = "tnbg"\nversion = "1.0"\n'
        'source = { git = "https://127.0.0.1/g.git?rev=main#0123456789abcdef" }\n'
        '[[package]]\nname = "tnbu"\nversion = "2.0"\n'
        'source = { url = "https://127.0.0.1/tnbu-2.0.tar.gz" }\n'
        'sdist = { url = "https://127.0.0.1/tnbu-2.0.tar.gz", hash = "sha256:ab" }\n'
    )
    pins = pins_from_file(str(lock), _image("3.11"), IndexSettings(), resolve=False)
    assert [(p.name, p.version, p.note) for p in pins] == [
        ("tnbg", "1.0", "from git+https://127.0.0.1/g.git@0123456789abcdef, fetched at submit"),
        ("tnbu", "2.0", "from https://127.0.0.1/tnbu-2.0.tar.gz, fetched at submit"),
    ]
    assert pins[1].direct is not None and pins[1].direct.sha256 == "sha256:ab"


def test_hash_checking_mode_covers_url_and_git_lines(tmp_path: Path) -> None:
    """Once a line has a hash, a URL line needs one and a git line cannot be checked, as
    pip refuses them: one line each, in a dry run too (they were installed unchecked)."""
    reqs = tmp_path / "requirements.txt"
    for line, said in [
        (
            "tnby @ https://alice:t0k@127.0.0.1/x/tnby-1.0-py3-none-any.whl",
            "tnby from https://****@127.0.0.1/x/tnby-1.0-py3-none-any.whl has none (pip's"
            " hash-checking mode needs one for every distribution): add --hash=sha256:… to"
            " its line, or remove every --hash",
        ),
        (
            "git+https://127.0.0.1/r.git@v1#egg=tnbx",
            "tnbx from git+https://127.0.0.1/r.git@v1 is a git checkout, which pip's"
            " hash-checking mode cannot check: use a wheel URL with --hash, or remove every"
            " --hash",
        ),
    ]:
        reqs.write_text(f"tnbdep==1.0 --hash=sha256:{'a' * 64}\n{line}\n")
        with pytest.raises(TorchxNbError) as e:
            pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
        assert (
            str(e.value)
            == f"--packages {reqs}: some lines have --hash"
            + (" and " if "has none" in said else ", and ")
            + said
        )


@pytest.mark.parametrize(
    "line", ["./pkg_x", "-e ./pkg_x", "git+https://127.0.0.1/x.git#egg=x", "pkg-x @ file:PKG"]
)
def test_a_folder_an_editable_or_a_url_in_a_constraints_file_is_one_line(
    tmp_path: Path, line: str
) -> None:
    """A constraints file only limits the versions of packages required elsewhere (pip
    refuses an unnamed line there: "Unnamed requirements are not allowed as constraints");
    such a folder was built and installed into the layer as if it were required."""
    (tmp_path / "pkg_x").mkdir()
    (tmp_path / "pkg_x" / "pyproject.toml").write_text(
        '[project]\nname = "pkg-x"\nversion = "1.0"\n'
    )
    line = line.replace("file:PKG", (tmp_path / "pkg_x").as_uri())
    (tmp_path / "cons.txt").write_text(f"tnbdep<2\n{line}\n")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("-c cons.txt\ntnbdep\n")
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert str(e.value) == (
        f"--packages {tmp_path / 'cons.txt'}:2: {line!r} is in a constraints file (-c), which"
        " limits the versions of packages required elsewhere: a folder, an editable or a URL"
        " there is not honoured (pip refuses the unnamed ones): move it to a requirements"
        " file (-r)"
    )
    (tmp_path / "cons.txt").write_text("tnbdep<2\n")
    assert [p.name for p in pins_from_file(str(reqs), _image("3.11"), IndexSettings(), False)] == [
        "tnbdep"
    ]


def test_a_path_line_without_a_leading_dot_is_a_folder_as_pip_takes_it(tmp_path: Path) -> None:
    """pip takes a line holding a path separator as a path (``sub/pkg``, as written by many
    projects): it is that folder, not 'not a requirement'."""
    folder = tmp_path / "sub" / "pkg_y"
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "pkg-y"\nversion = "1.0"\n')
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("sub/pkg_y\ntnbdep==1.0\n")
    dry = pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert [(p.name, p.folder) for p in dry] == [("tnbdep", None), ("pkg-y", str(folder))]
    reqs.write_text("sub/missing\n")
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert str(e.value) == (
        f"--packages {reqs}:1: 'sub/missing' is not a folder to build a wheel from"
    )


def test_a_pyproject_whose_dependencies_are_dynamic_resolves_them_from_its_backend(
    tmp_path: Path,
) -> None:
    """``dynamic = ["dependencies"]`` (setuptools reading a requirements file): the table is
    empty, and the project's wheel went in without them (installed with --no-deps), so the
    job could not import them. They are resolved at submit from the project's own metadata, and a
    project that is not a package to build is one line."""
    from tests.infra.kernel_venv import download_wheels
    from tests.infra.pypi_index import make_wheel

    links = tmp_path / "links"
    download_wheels(links, "setuptools>=61")
    make_wheel(links, "tnbdep", "1.0")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tnbdyn"\nversion = "1.0"\ndynamic = ["dependencies"]\n'
        '[tool.setuptools]\npy-modules = ["tnbdyn"]\n'
        '[tool.setuptools.dynamic]\ndependencies = {file = ["requirements.txt"]}\n'
    )
    (project / "requirements.txt").write_text("tnbdep==1.0\n")
    (project / "tnbdyn.py").write_text("import tnbdep\n")
    index = IndexSettings(no_index=True, find_links=(str(links),))
    pins = pins_from_file(str(project / "pyproject.toml"), _image("3.11"), index)
    assert [(p.name, p.version) for p in pins] == [("tnbdep", "1.0"), ("tnbdyn", "1.0")]
    dry = pins_from_file(str(project / "pyproject.toml"), _image("3.11"), index, resolve=False)
    assert [p.note for p in dry] == [
        "the project, built from its folder (its dynamic dependencies resolved at submit)"
    ]
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text.split("[tool.setuptools]")[0].split("\n", 3)[3])
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(str(project / "pyproject.toml"), _image("3.11"), index, resolve=False)
    assert str(e.value) == (
        f"--packages {project / 'pyproject.toml'}: its dependencies are dynamic (a build"
        " backend computes them) and the project is not a package to build: list them in"
        " [project], or give the requirements file or uv.lock they come from"
    )


def test_require_hashes_turns_pip_s_hash_checking_mode_on(tmp_path: Path) -> None:
    """``--require-hashes`` (pip's docs put it at the top of a hashed file) is the mode pip
    turns on: it was refused as an index option ('set indexes in pip's configuration'), so
    such a file could not be used at all. Other options say to remove them."""
    import hashlib

    from tests.infra.pypi_index import make_wheel

    links = tmp_path / "links"
    wheel = make_wheel(links, "tnbdep", "1.0")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    index = IndexSettings(no_index=True, find_links=(str(links),))
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(f"--require-hashes\ntnbdep==1.0 --hash=sha256:{sha}\n")
    pins = pins_from_file(str(reqs), _image("3.11"), index)
    assert [(p.name, p.hashes) for p in pins] == [("tnbdep", (f"sha256:{sha}",))]
    reqs.write_text("--require-hashes\ntnbdep==1.0\n")
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(str(reqs), _image("3.11"), index)
    assert "tnbdep has none (pip's hash-checking mode needs one" in str(e.value)
    reqs.write_text("--pre\ntnbdep==1.0\n")
    with pytest.raises(TorchxNbError) as e:
        pins_from_file(str(reqs), _image("3.11"), index, resolve=False)
    assert str(e.value) == (
        f"--packages {reqs}:1: the option '--pre' is not honoured here: remove it (the layer"
        " installs the resolved pins' wheels)"
    )


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_a_requirements_file_with_a_byte_order_mark_is_read_as_pip_reads_it(
    tmp_path: Path, encoding: str
) -> None:
    """An editor's UTF-8 BOM, or UTF-16 from ``pip freeze > requirements.txt`` in Windows
    PowerShell: pip reads them by their mark; they were refused ('\\ufefftnbdep==1.0' is not
    a requirement; cannot read … 'utf-8' codec can't decode)."""
    (tmp_path / "base.txt").write_bytes("tnbserved==0.9\r\n".encode(encoding))
    reqs = tmp_path / "requirements.txt"
    reqs.write_bytes("tnbdep==1.0\r\n-r base.txt\r\n".encode(encoding))
    dry = pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert [(p.name, p.version) for p in dry] == [("tnbdep", "1.0"), ("tnbserved", "0.9")]


def test_git_file_lines_in_both_forms_are_checkouts(tmp_path: Path) -> None:
    """``git+file:///repo@rev#egg=`` (taken for a path: 'is not a requirement') and ``name @
    git+file:///repo@rev`` (taken for a file URL: 'not a wheel') are git checkouts of a local
    repository: listed for submit by a dry run, checked out at submit."""
    from tests.infra.git_server import BUILD, commit_to, make_repo

    commits = {}
    for name in ("tnbgf", "tnbgn"):
        work = make_repo(tmp_path / "repos", name)
        commits[name] = commit_to(
            work,
            {
                "pyproject.toml": BUILD + f'[project]\nname = "{name}"\nversion = "1.0"\n',
                f"{name}.py": "",
            },
        )
    gf, gn = ((tmp_path / "repos" / f"{n}.git").as_uri() for n in ("tnbgf", "tnbgn"))
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(f"git+{gf}@main#egg=tnbgf\ntnbgn @ git+{gn}@main\n")
    dry = pins_from_file(str(reqs), _image("3.11"), IndexSettings(), resolve=False)
    assert [(p.name, p.note) for p in dry] == [
        ("tnbgf", f"from git+{gf}@main, fetched at submit"),
        ("tnbgn", f"from git+{gn}@main, fetched at submit"),
    ]
    pins = pins_from_file(str(reqs), _image("3.11"), IndexSettings())
    got = {p.name: (p.version, p.identity) for p in pins}
    assert got == {n: ("1.0", f"git:{c}") for n, c in commits.items()}


def test_uv_resolves_a_requirements_file_for_the_image_s_full_python_version(
    tmp_path: Path,
) -> None:
    """A dependency's own marker on a patch release (tnbtop requires ``tnbpatch;
    python_full_version >= '3.11.4'``) is uv's to evaluate: it was given the minor version
    alone, which it takes as 3.11.0, so an image declaring 3.11.7 lost tnbpatch."""
    import zipfile

    from tests.infra.pypi_index import make_wheel

    links = tmp_path / "links"
    make_wheel(links, "tnbpatch", "1.0")
    info = "tnbtop-1.0.dist-info"
    with zipfile.ZipFile(links / "tnbtop-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("tnbtop.py", "")
        zf.writestr(
            f"{info}/METADATA",
            "Metadata-Version: 2.1\nName: tnbtop\nVersion: 1.0\n"
            "Requires-Dist: tnbpatch; python_full_version >= '3.11.4'\n",
        )
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("tnbtop==1.0\n")
    index = IndexSettings(no_index=True, find_links=(str(links),))

    def resolved(full: str | None) -> list[tuple[str, str]]:
        image = ImageContents("3.11", "/usr/local", (), python_full=full)
        return _names(pins_from_file(str(reqs), image, index))

    assert resolved("3.11.7") == [("tnbpatch", "1.0"), ("tnbtop", "1.0")]
    assert resolved("3.11.2") == [("tnbtop", "1.0")]
