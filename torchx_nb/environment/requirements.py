"""``--packages FILE``: the distributions a requirements.txt, a pyproject.toml or a uv.lock
names, for the image's Python and platform, instead of the kernel's. A requirements file is
read line by line (``-r``/``-c`` includes, ``-e`` and plain local paths, hashes, markers; an
index option, a URL or a VCS line it cannot honour is one line naming it, before anything is
built); a pyproject.toml gives its ``[project] dependencies`` (and ``[extra]`` when asked).
At submit they are resolved with ``uv pip compile`` (the kernel's index settings); a local
folder becomes a wheel built from it. A dry run resolves nothing (it would download or build):
it lists what the file names, "resolved at submit". A uv.lock: lockfile.py."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from torchx_nb.environment.direct import DirectRef, fetch, parse_direct
from torchx_nb.environment.index import IndexSettings, file_url_path, mask_url, uv_message
from torchx_nb.environment.lockfile import (
    FilePin,
    marker_environment,
    marker_holds,
    pins_from_lock,
)
from torchx_nb.environment.packages_option import check_packages_option as check_packages_option
from torchx_nb.environment.packages_option import split_option
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.image_contents import normalize

if TYPE_CHECKING:
    from torchx_nb.workspace.image_contents import ImageContents

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#]+)")
UNRESOLVED = "(at submit)"
_MAX_DEPTH = 10
_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's: a '#' at the start or after a space
_ENV_VAR = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)\}")  # pip expands ${NAME} only
_HASH_MODE = ""  # a key of the hashes no name has: --require-hashes turned the mode on
_INDEX_OPTIONS = frozenset(
    {
        "-i",
        "--index-url",
        "--extra-index-url",
        "--no-index",
        "-f",
        "--find-links",
        "--trusted-host",
    }
)
# a URL line: a remote URL, or a VCS checkout of a local repository (git+file:///repo@rev)
_URL = re.compile(
    r"^(?:(?:[A-Za-z][A-Za-z0-9+.-]*\+)?(?:https?|ftp|ssh|git|svn|hg|bzr)://|(?:git|hg|svn|bzr)\+file:)"
)


def _is_path(spec: str, base: Path) -> Path | None:
    """The local folder a requirement line names (``./pkg``, ``/abs``, ``file://``), if any."""
    text = spec.split(";", 1)[0].strip()
    if text.startswith("file:"):
        text = file_url_path(text) or text
    elif " @ file:" in text:
        text = file_url_path(text.split(" @ ", 1)[1].strip()) or text
    elif not text.startswith((".", "/", "~")) and (
        "/" not in text or " @ " in text or "://" in text
    ):  # pip takes a line with a path separator as a path too (sub/pkg)
        return None
    folder = (base / Path(text).expanduser()).resolve()
    return folder


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """A requirements file's lines as pip reads them: a line ending with ``\\`` (and holding
    no comment) continues on the next, numbered by its first line; comments dropped;
    ``${NAME}`` replaced by the environment variable ``NAME`` when it is set."""
    out: list[tuple[int, str]] = []
    held: list[str] = []
    first = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.endswith("\\") and not _COMMENT.search(raw):
            first = first or number
            held.append(raw[:-1])
            continue
        out.append((first or number, "".join([*held, raw])))
        held, first = [], 0
    if held:
        out.append((first, "".join(held)))
    return [
        (n, _ENV_VAR.sub(lambda m: os.environ.get(m["name"], m[0]), _COMMENT.sub("", t)).strip())
        for n, t in out
    ]


def _decoded(data: bytes) -> str:
    """A requirements file's text as pip decodes it: by its byte-order mark when it has one
    (an editor's UTF-8 BOM; ``pip freeze > requirements.txt`` in Windows PowerShell writes
    UTF-16), else UTF-8."""
    import codecs

    for bom, encoding in (
        (codecs.BOM_UTF32_LE, "utf-32"),
        (codecs.BOM_UTF32_BE, "utf-32"),
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            return data.decode(encoding)
    return data.decode("utf-8")


def _read_requirements(
    path: Path,
    lines: list[str],
    constraints: list[str],
    folders: list[Path],
    depth: int = 0,
    chain: tuple[Path, ...] = (),
    hashes: dict[str, set[str]] | None = None,
    direct: list[tuple[DirectRef, str]] | None = None,
    constraint: bool = False,
) -> None:
    """Gather ``path``'s requirement lines (includes followed), its constraints, its local
    folders, its URL and VCS references with their markers (into ``direct``) and the
    ``--hash`` values each name is given (into ``hashes``); a line that cannot be honoured
    is refused in one. ``constraint``: ``path`` is a constraints file (``-c``), whose
    lines only limit versions: a folder, an editable or a URL there is refused in one line
    (pip refuses the unnamed ones: "Unnamed requirements are not allowed as constraints")."""
    hashes = {} if hashes is None else hashes
    direct = [] if direct is None else direct
    if path in chain:
        cycle = " -> ".join(p.name for p in (*chain[chain.index(path) :], path))
        raise TorchxNbError(
            f"--packages: {chain[-1]} includes {path} again ({cycle}): remove that -r or -c"
        )
    if depth > _MAX_DEPTH:
        raise TorchxNbError(f"--packages: {path} is included more than {_MAX_DEPTH} deep")
    chain = (*chain, path)
    try:
        text = _decoded(path.read_bytes())
    except (OSError, UnicodeDecodeError) as e:
        raise TorchxNbError(f"--packages: cannot read {path} ({e})") from None
    for number, line in _logical_lines(text):
        if not line:
            continue
        where = f"{path}:{number}"
        given = re.findall(r"\s--hash[=\s](\S+)", f" {line}")
        line = re.sub(r"\s--hash[=\s]\S+", "", f" {line}").strip()
        option, _, rest = line.partition(" ")
        rest = rest.strip()
        if option.startswith("--") and "=" in option and not rest:
            option, _, rest = option.partition("=")
        if option in ("-r", "--requirement", "-c", "--constraint"):
            target = (path.parent / rest).resolve()
            if option in ("-r", "--requirement"):
                _read_requirements(
                    target, lines, constraints, folders, depth + 1, chain, hashes, direct,
                    constraint,
                )  # fmt: skip
            else:
                sub: list[str] = []
                _read_requirements(
                    target, sub, constraints, folders, depth + 1, chain, hashes, direct, True
                )
                constraints += sub
            continue
        editable = option in ("-e", "--editable")
        spec = rest if editable else line
        if constraint and (
            editable or " @ " in spec or _URL.match(spec) or _is_path(spec, path.parent)
        ):  # a constraint made into a requirement: it was built and installed
            raise TorchxNbError(
                f"--packages {where}: {mask_url(line)!r} is in a constraints file (-c), which"
                " limits the versions of packages required elsewhere: a folder, an editable"
                " or a URL there is not honoured (pip refuses the unnamed ones): move it to a"
                " requirements file (-r)"
            )
        if line == "--require-hashes":  # pip's hash-checking mode, asked for outright
            hashes.setdefault(_HASH_MODE, set())
            continue
        if spec.startswith("-"):
            found = spec.split()[0].split("=", 1)[0]
            fix = (
                "set indexes in pip's configuration (the environment layer uses it)"
                if found in _INDEX_OPTIONS
                else "remove it (the layer installs the resolved pins' wheels)"
            )
            raise TorchxNbError(
                f"--packages {where}: the option {found!r} is not honoured here: {fix}"
            )
        if _URL.match(spec):  # a bare URL or VCS line (pip takes them; the name is in #egg=)
            url, _, marker = spec.partition(" ;")
            ref = parse_direct(url.strip())
            direct.append((_hashed(ref, given, hashes), marker.strip()))
            continue
        folder = _is_path(spec, path.parent)
        if folder is not None and folder.is_file() and folder.suffix in (".whl", ".gz", ".zip"):
            named = spec.split(" @ ", 1)[0].strip() if " @ " in spec else None
            direct.append((_hashed(DirectRef(named, folder.as_uri()), given, hashes), ""))
            continue
        if folder is not None:
            if not folder.is_dir():
                raise TorchxNbError(
                    f"--packages {where}: {spec!r} is not a folder to build a wheel from"
                )
            folders.append(folder)
            continue
        name, named_url = _check_requirement(spec, where)
        if named_url is not None:  # name @ URL (a wheel, an sdist or a VCS checkout)
            marker = spec.split(";", 1)[1].strip() if ";" in spec.split("#", 1)[-1] else ""
            direct.append((_hashed(parse_direct(named_url, name), given, hashes), marker))
            continue
        if given:
            hashes.setdefault(normalize(name), set()).update(h.lower() for h in given)
        lines.append(spec)


def _hashed(ref: DirectRef, given: list[str], hashes: dict[str, set[str]]) -> DirectRef:
    """``ref`` with the sha256 its line's ``--hash`` gives (the file must have it), noted in
    ``hashes`` (which turns pip's hash-checking mode on)."""
    if given:
        hashes.setdefault(normalize(ref.guess_name()), set()).update(h.lower() for h in given)
    sha = next((h.split(":", 1)[1] for h in given if h.lower().startswith("sha256:")), None)
    return replace(ref, sha256=sha.lower()) if sha else ref


def _check_requirement(spec: str, where: str) -> tuple[str, str | None]:
    """The name ``spec`` requires and its URL (``name @ URL``), after refusing in one line
    what cannot be honoured."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(spec)
    except InvalidRequirement as e:
        said = str(e).splitlines()[0] if str(e) else "unreadable"
        raise TorchxNbError(
            f"--packages {where}: {mask_url(spec)!r} is not a requirement ({said})"
        ) from None
    return req.name, req.url or None


def _from_pyproject(
    path: Path, asked: tuple[str, ...], direct: list[tuple[DirectRef, str]]
) -> tuple[list[str], bool]:
    """A pyproject.toml's dependencies (and the extras asked for; its URL and VCS ones into
    ``direct``), and whether the project itself is a package to ship (uv's rule: it has a
    ``[build-system]``, unless ``tool.uv.package = false``; or ``tool.uv.package = true``)."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TorchxNbError(f"--packages {path}: not a readable pyproject.toml ({e})") from None
    project = data.get("project") or {}
    optional = project.get("optional-dependencies") or {}
    unknown = [a for a in asked if a not in optional]
    if unknown:
        raise TorchxNbError(
            f"--packages {path}: {', '.join(unknown)} is not an extra of"
            f" {project.get('name', 'the project')} (it has: {', '.join(optional) or 'none'})"
        )
    specs = [str(d) for d in project.get("dependencies") or []]
    for name in asked:
        specs += [str(d) for d in optional[name]]
    kept = []
    for spec in specs:
        name, url = _check_requirement(spec, str(path))
        if url is None:
            kept.append(spec)
        elif url.startswith("file:"):
            raise TorchxNbError(
                f"--packages {path}: {name} @ {url} is a local path: list it in a"
                " requirements file (-e ./folder), or publish it"
            )
        else:
            marker = spec.split(";", 1)[1].strip() if ";" in spec.split("#", 1)[-1] else ""
            direct.append((parse_direct(url, name), marker))
    package = (data.get("tool") or {}).get("uv", {}).get("package")
    is_package = bool(project.get("name")) and (
        package is True or (package is None and "build-system" in data)
    )
    return kept, is_package


def _folder_pin(folder: Path) -> FilePin:
    """A local folder's name and version, from its pyproject.toml when it says them."""
    import tomllib

    project: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        project = tomllib.loads((folder / "pyproject.toml").read_text()).get("project") or {}
    name = str(project.get("name") or folder.name)
    version = str(project.get("version") or UNRESOLVED)
    return FilePin(name, version, str(folder), f"built from {folder}")


def _compile(
    specs: list[str],
    constraints: list[str],
    origin: Path,
    contents: ImageContents | None,
    index: IndexSettings,
) -> list[FilePin]:
    from torchx_nb.environment.wheels import uv_bin

    with tempfile.TemporaryDirectory(prefix="torchx-nb-reqs-") as tmp:
        reqs, cons = Path(tmp) / "requirements.in", Path(tmp) / "constraints.txt"
        reqs.write_text("\n".join(specs) + "\n")
        cons.write_text("\n".join(constraints) + "\n")
        cmd = [uv_bin(), "pip", "compile", "--no-config", "--no-header", "--no-annotate"]
        cmd += ["--quiet", "-c", str(cons)]
        if contents is not None and contents.python:
            # its full version when the image says it (uv takes 3.11 as 3.11.0)
            version = contents.python_full or contents.python
            cmd += ["--python-version", version, "--python-platform", contents.platform]
        cmd += [*index.uv_args(), str(reqs)]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=600, env=index.uv_env()
        )
    if proc.returncode != 0:
        why = uv_message(proc.stderr, 300)
        raise TorchxNbError(f"--packages {origin}: cannot resolve its requirements ({why})")
    return [
        FilePin(m[1], m[2]) for line in proc.stdout.splitlines() if (m := _PIN.match(line.strip()))
    ]


def pins_from_file(
    option: str, contents: ImageContents | None, index: IndexSettings, resolve: bool = True
) -> list[FilePin]:
    """The distributions ``option`` (``FILE`` or ``FILE[names]``) gives for the image;
    without ``resolve`` (a dry run) a requirements file's lines are listed unresolved, and
    nothing is fetched."""
    path, asked = split_option(option)
    if path.name == "uv.lock":
        pins = pins_from_lock(path, contents, asked)
        if not resolve:
            return pins
        return [_fetched_pin(p.direct, str(path), index, p) if p.direct else p for p in pins]
    specs: list[str] = []
    constraints: list[str] = []
    folders: list[Path] = []
    hashes: dict[str, set[str]] = {}
    direct: list[tuple[DirectRef, str]] = []
    local: list[FilePin] = []
    computed: list[Path] = []  # a project whose backend computes its dependencies
    if path.suffix == ".toml":
        specs, is_package = _from_pyproject(path, asked, direct)
        dynamic = _dynamic_dependencies(path, asked)
        if dynamic and not is_package:
            raise TorchxNbError(
                f"--packages {path}: its {dynamic} are dynamic (a build backend computes"
                " them) and the project is not a package to build: list them in [project],"
                " or give the requirements file or uv.lock they come from"
            )
        if is_package:  # the project itself: a wheel built from its folder
            pin = _folder_pin(path.parent.resolve())
            note = "the project, built from its folder"
            if dynamic:  # resolved with the rest at submit, as the backend says them
                computed.append(path.parent.resolve())
                note += f" (its dynamic {dynamic} resolved at submit)"
            local.append(replace(pin, note=note))
    else:
        _read_requirements(path, specs, constraints, folders, hashes=hashes, direct=direct)
    local += [_folder_pin(f) for f in folders]
    env = marker_environment(contents)
    direct = [(ref, m) for ref, m in direct if not m or marker_holds(m, env, path)]
    if hashes:  # a --hash on any line (a URL's #sha256= alone does not turn the mode on)
        _check_hash_mode(path, [ref for ref, _ in direct])
    if not resolve:
        pins = [p for s in specs if (p := _unresolved(s, env, path)) is not None]
        pins += [
            FilePin(
                ref.guess_name(),
                ref.guess_version() or UNRESOLVED,
                note=f"from {ref.shown}, fetched at submit",
                direct=ref,
            )
            for ref, _ in direct
        ]
    elif not specs and not folders and not direct and not computed:
        pins = []
    else:
        fetched = [_fetched_pin(ref, str(path), index) for ref, _ in direct]
        # the folders and what was fetched go into the resolution too (as file URLs): their
        # own dependencies are resolved with the rest, as pip install -r would install them;
        # their wheels are built (or taken) apart and installed without dependencies
        folder_specs = [f.as_uri() for f in [*folders, *computed]]
        folder_specs += [f"{p.name} @ {Path(str(p.folder)).as_uri()}" for p in fetched]
        pins = _compile([*specs, *folder_specs], constraints, path, contents, index)
        unhashed = [p.name for p in pins if hashes and normalize(p.name) not in hashes]
        if unhashed:  # pip's hash-checking mode: once one line has a hash, every one does
            raise TorchxNbError(
                f"--packages {path}: some lines have --hash and {', '.join(unhashed[:5])}"
                f"{' and more' if len(unhashed) > 5 else ''} has none (pip's hash-checking"
                " mode needs one for every distribution): add them (uv pip compile"
                " --generate-hashes), or remove every --hash"
            )
        local += fetched
    pins = [replace(p, hashes=tuple(sorted(hashes.get(normalize(p.name), ())))) for p in pins]
    return [*pins, *local]


def _dynamic_dependencies(path: Path, asked: tuple[str, ...]) -> str | None:
    """``dependencies`` when a pyproject.toml's ``[project] dynamic`` leaves them to the
    build backend (they are in no table to read)."""
    import tomllib

    del asked  # a dynamic extra is refused as unknown by _from_pyproject
    try:
        dynamic = (tomllib.loads(path.read_text()).get("project") or {}).get("dynamic") or []
    except (OSError, ValueError):
        return None
    return "dependencies" if "dependencies" in dynamic else None


def _check_hash_mode(path: Path, direct: list[DirectRef]) -> None:
    """pip's hash-checking mode, once a line has a hash, for the URL and VCS lines too: a
    URL without a hash, or a git checkout (which has no file to hash), is one line."""
    for ref in direct:
        if ref.vcs is not None:
            raise TorchxNbError(
                f"--packages {path}: some lines have --hash, and {ref.guess_name()} from"
                f" {ref.shown} is a {ref.vcs} checkout, which pip's hash-checking mode cannot"
                " check: use a wheel URL with --hash, or remove every --hash"
            )
        if not ref.sha256:
            raise TorchxNbError(
                f"--packages {path}: some lines have --hash and {ref.guess_name()} from"
                f" {ref.shown} has none (pip's hash-checking mode needs one for every"
                " distribution): add --hash=sha256:… to its line, or remove every --hash"
            )


def _fetched_pin(
    ref: DirectRef, origin: str, index: IndexSettings, pin: FilePin | None = None
) -> FilePin:
    """``ref`` fetched (at submit) as a pin made from a local folder or file: its name and
    version from what came (a lock's ``pin`` as the lock says them), its identity the
    commit or the file's sha256."""
    from packaging.utils import canonicalize_name

    got = fetch(ref, origin, index)
    if got.path.is_dir():
        found = _folder_pin(got.path)
    else:
        guessed = replace(ref, url=got.path.as_uri())
        found = FilePin(guessed.guess_name(), guessed.guess_version() or UNRESOLVED, "")
    name, version = (pin.name, pin.version) if pin else (found.name, found.version)
    named_other = ref.name and canonicalize_name(ref.name) != canonicalize_name(found.name)
    if named_other and not pin and (got.path.is_file() or found.name != got.path.name):
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown} holds {found.name}, not {ref.name}:"
            " fix the name or the URL"
        )
    return FilePin(
        ref.name or name,
        version,
        str(got.path),
        f"from {ref.shown}",
        identity=got.identity,
    )


def _unresolved(spec: str, env: dict[str, str], where: Path) -> FilePin | None:
    """A requirement as the file says it, for a dry run: its version when it pins one (None
    when its marker does not hold on the image)."""
    from packaging.requirements import Requirement

    req = Requirement(spec)
    if not marker_holds(req.marker, env, where):
        return None
    exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
    version = exact[0] if len(exact) == 1 and "*" not in exact[0] else UNRESOLVED
    return FilePin(req.name, version, None, f"{req.specifier or 'any version'}, resolved at submit")
