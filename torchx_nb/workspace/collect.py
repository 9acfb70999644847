"""Which files of a workspace ship with a job, decided by design rather than by a list of names:

1. every hidden file and folder (a name starting with ``.``), at any depth, stays home: that is
   where credentials, histories and tool state live (``.aws``, ``.kube``, ``.git``, ``.netrc``,
   ``.config/...``, ``.local/share/...``);
2. well-known secret names that are not hidden (``*.pem``, ``id_rsa``, ``*.tfstate``...) and our
   own state (the data dir, the job store, log folders marked with ``LOG_MARKER``) stay home;
3. every other file is read for secret-shaped content (``scan.py``); a hit stays home, with one
   line naming the file, the kind and how to ship it anyway;
4. the ignore file's rules apply, and its ``!`` lines can re-include any of the above (with a
   warning for a secret)."""

from __future__ import annotations

import os
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from torchx_nb.paths import LOG_MARKER
from torchx_nb.specs.exceptions import WorkspaceError as WorkspaceError
from torchx_nb.workspace.ignore import Matcher, Pattern, parse_patterns

if TYPE_CHECKING:
    from torchx_nb.workspace.scan import ScanCache

IGNORE_FILES = (".torchxignore", ".dockerignore")
DOCKERFILE = "Dockerfile.torchx"
DEFAULT_MAX_BYTES = 2 * 1024**3

HIDDEN_PATTERNS = ["**/.*"]
SECRET_PATTERNS = [
    # hidden already; named so that re-including one warns in plain words
    "**/.env",
    "**/.env.*",
    "**/.aws",
    "**/.ssh",
    "**/.kube",
    "**/.gnupg",
    "**/.docker",
    "**/.netrc",
    "**/.git-credentials",
    "**/.pgpass",
    "**/.pypirc",
    "**/.npmrc",
    "**/.git",
    # not hidden
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/*.jks",
    "**/*.keystore",
    "**/*.kdbx",
    "**/*.ovpn",
    "**/id_rsa*",
    "**/id_dsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/credentials.json",
    "**/client_secret*.json",
    "**/*.tfstate",
    "**/*.tfstate.backup",
    "**/*.tfvars",
    "**/secrets.yaml",
    "**/secrets.yml",
    "**/secrets.toml",
    "**/secrets.json",
    "**/*_history",
    "**/history.sqlite*",
    "**/logins.json",
    "**/key4.db",
    "**/Cookies",
    # Jupyter's runtime files (kernel connection files carry signing keys) and config, when
    # they lie outside a hidden folder
    "**/jupyter/runtime",
    "**/jupyter_server_config.*",
    "**/jupyter_notebook_config.*",
]
CLUTTER_PATTERNS = [
    "**/__pycache__",
    "**/*.pyc",
    "venv",
    "**/node_modules",
]


class SecretShippedWarning(UserWarning):
    """A secret-looking file ships because the ignore file re-included it."""


class SecretLeftOutWarning(UserWarning):
    """A file that would have shipped holds secret-shaped content and was left out."""


@dataclass(frozen=True)
class WorkspaceFile:
    """A file to ship: its relative posix path, size, mode, and link target for symlinks.
    ``ctime_ns`` and ``inode`` make the fingerprint see an edit whose mtime was put back."""

    path: str
    size: int
    mode: int
    mtime_ns: int
    link: str | None = None
    ctime_ns: int = 0
    inode: int = 0


@dataclass
class WorkspaceFiles:
    """The result of collecting a workspace."""

    root: Path
    files: list[WorkspaceFile] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)
    ignore_file: str | None = None
    shipped_secrets: list[tuple[str, str]] = field(default_factory=list)
    secrets_left_out: list[tuple[str, str]] = field(default_factory=list)
    environments: list[str] = field(default_factory=list)  # Python environments left out

    def secret_warnings(self) -> list[str]:
        """One line per secret-looking file that ships because the ignore file re-included it."""
        return [
            f"{path} {why} and ships because {self.ignore_file} re-includes it; remove the '!'"
            " line unless the job needs it"
            for path, why in self.shipped_secrets
        ]

    def left_out_lines(self) -> list[str]:
        """One line per file left out for its content: the file, the kind, how to ship it."""
        ignore = self.ignore_file or ".torchxignore"
        return [
            f"{path} was left out of the workspace: it holds a {what}; to ship it anyway, add"
            f" the line '!{path}' to {ignore} (or mark the line 'pragma: allowlist secret')"
            for path, what in self.secrets_left_out
        ]

    def warn(self) -> None:
        """Say what was left out for its content and which secrets ship on request."""
        for line in self.left_out_lines():
            warnings.warn(line, SecretLeftOutWarning, stacklevel=3)
        for line in self.secret_warnings():
            warnings.warn(line, SecretShippedWarning, stacklevel=3)

    def copy_to(self, dest: Path) -> None:
        """Copy the files into the folder ``dest`` (symlinks as symlinks), each opened without
        following a link swapped in since the listing."""
        import shutil

        from torchx_nb.workspace.safe_open import open_regular

        for f in self.files:
            target = dest / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if f.link is not None:
                os.symlink(f.link, target)
                continue
            with open_regular(self.root / f.path) as (src, _):
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, f.mode & 0o777)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def fingerprint(self) -> str:
        """Changes whenever a shipped file is added, removed, resized, touched or re-moded."""
        import hashlib

        h = hashlib.sha256()
        for f in self.files:
            h.update(
                f"{f.path}\0{f.size}\0{f.mode}\0{f.mtime_ns}\0{f.ctime_ns}\0{f.inode}"
                f"\0{f.link}\n".encode()
            )
        return h.hexdigest()

    def preview(self, max_rows: int = 50) -> str:
        """A table of what ships (largest first) and what was left out, and why."""
        lines = [
            f"workspace {self.root}: {len(self.files)} files, {_human(self.total_bytes)}"
            + (f" (rules from {self.ignore_file})" if self.ignore_file else "")
        ]
        for f in sorted(self.files, key=lambda f: -f.size)[:max_rows]:
            lines.append(f"  {_human(f.size):>9}  {f.path}" + (f" -> {f.link}" if f.link else ""))
        if len(self.files) > max_rows:
            lines.append(f"  ... and {len(self.files) - max_rows} more")
        if self.shipped_secrets:
            lines.append(f"secrets that ship because {self.ignore_file} re-includes them:")
            for path, why in self.shipped_secrets:
                lines.append(f"  {path}  [{why}]")
        if self.excluded:
            lines.append(f"left out ({len(self.excluded)}):")
            for path, why in self.excluded[:max_rows]:
                lines.append(f"  {path}  [{why}]")
            if len(self.excluded) > max_rows:
                lines.append(f"  ... and {len(self.excluded) - max_rows} more")
        return "\n".join(lines)


def environment_kind(folder: Path) -> str | None:
    """What Python environment ``folder`` is (a virtualenv holds ``pyvenv.cfg``, a conda
    environment ``conda-meta/``), or None. Its files are an interpreter and packages built for
    this machine: they never ship as workspace files."""
    if (folder / "pyvenv.cfg").is_file():
        return "a virtualenv (pyvenv.cfg)"
    if (folder / "conda-meta").is_dir():
        return "a conda environment (conda-meta/)"
    return None


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _reason(p: Pattern) -> str:
    return p.source if p.source in ("hidden", "secret", "clutter") else f"{p.source}: {p.text}"


def _own_state(base: Path) -> list[str]:
    """Root-relative patterns for torchx_nb's data folder, the job store and Jupyter's runtime
    folder when they lie inside the workspace wherever they were moved to."""
    import contextlib

    from torchx_nb.paths import data_dir, jobstore_path

    places: list[Path] = [data_dir(), jobstore_path()]
    with contextlib.suppress(Exception):
        from jupyter_core.paths import jupyter_runtime_dir

        places.append(Path(jupyter_runtime_dir()))
    out: list[str] = []
    for place in places:
        with contextlib.suppress(ValueError, OSError):
            rel = place.expanduser().resolve().relative_to(base).as_posix()
            if rel != ".":
                out.append("/" + rel)
    return out


def collect_workspace(
    root: str | os.PathLike[str],
    extra_excludes: tuple[str, ...] = (),
    include_secrets: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    scan: ScanCache | bool = True,
) -> WorkspaceFiles:
    """List the files of ``root`` that ship with a job. ``scan`` reads every file for secrets
    (True: with the cache in the data dir; a ``ScanCache``: with that one; False: not at all);
    ``include_secrets`` ships hidden and secret-looking files too (the tests' escape hatch)."""
    from torchx_nb.workspace.scan import ScanCache, default_cache, scan_files

    base = Path(root).expanduser().resolve()
    if not base.is_dir():
        raise WorkspaceError(f"workspace {str(root)!r} is not a folder")
    secrets = Matcher(
        parse_patterns(HIDDEN_PATTERNS, "hidden")
        + parse_patterns(SECRET_PATTERNS + _own_state(base), "secret")
    )
    patterns: list[Pattern] = []
    if not include_secrets:
        patterns += secrets.patterns
    patterns += parse_patterns(CLUTTER_PATTERNS, "clutter")
    patterns += parse_patterns(extra_excludes, "excluded")
    result = WorkspaceFiles(root=base)
    for name in IGNORE_FILES:
        ignore = base / name
        if ignore.is_file():
            patterns += parse_patterns(ignore.read_text().splitlines(), name)
            result.ignore_file = name
            break
    matcher = Matcher(patterns)
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = Path(dirpath).relative_to(base).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        if LOG_MARKER in filenames:
            result.excluded.append((f"{rel_dir}/" if rel_dir else "./", "torchx_nb logs"))
            dirnames[:] = []
            continue
        keep_dirs = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            full = Path(dirpath) / d
            if full.is_symlink():
                filenames.append(d)
                continue
            kind = environment_kind(full)
            if kind is not None and not matcher.may_reinclude_under(rel):
                result.excluded.append((rel + "/", f"environment: {kind}"))
                result.environments.append(rel + "/")
                continue
            hit = matcher.excluded_by(rel)
            if hit is not None and not matcher.may_reinclude_under(rel):
                result.excluded.append((rel + "/", _reason(hit)))
                continue
            keep_dirs.append(d)
        dirnames[:] = keep_dirs
        for fname in sorted(filenames):
            rel = f"{rel_dir}/{fname}" if rel_dir else fname
            hit = matcher.excluded_by(rel) if rel != DOCKERFILE else None
            if hit is not None:
                result.excluded.append((rel, _reason(hit)))
                continue
            # only a "!" line can have let a secret through the matcher above
            if (
                not include_secrets
                and matcher.has_negations
                and (secret_rule := secrets.excluded_by(rel)) is not None
            ):
                why = "is hidden" if secret_rule.source == "hidden" else "looks like a secret"
                result.shipped_secrets.append((rel, f"{why} ({secret_rule.text})"))
            full = Path(dirpath) / fname
            try:
                st = full.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                result.files.append(
                    WorkspaceFile(
                        rel, 0, 0o777, st.st_mtime_ns, os.readlink(full), st.st_ctime_ns, st.st_ino
                    )
                )
            elif stat.S_ISREG(st.st_mode):
                result.files.append(
                    WorkspaceFile(
                        rel,
                        st.st_size,
                        stat.S_IMODE(st.st_mode),
                        st.st_mtime_ns,
                        None,
                        st.st_ctime_ns,
                        st.st_ino,
                    )
                )
    result.files.sort(key=lambda f: f.path)
    if result.total_bytes > max_bytes:
        biggest = ", ".join(
            f"{f.path} ({_human(f.size)})" for f in sorted(result.files, key=lambda f: -f.size)[:3]
        )
        raise WorkspaceError(
            f"workspace {base} is {_human(result.total_bytes)}, over the {_human(max_bytes)}"
            f" limit; biggest: {biggest}. Exclude them in .torchxignore or pass a smaller"
            " --workspace"
        )
    if scan is not False and not include_secrets:
        cache = scan if isinstance(scan, ScanCache) else default_cache()
        found = scan_files(base, result.files, cache)
        if found:
            kept = []
            for f in result.files:
                finding = found.get(f.path)
                if finding is None:
                    kept.append(f)
                elif matcher.reincluded(f.path):
                    kept.append(f)
                    result.shipped_secrets.append((f.path, f"holds a {finding.describe()}"))
                else:
                    result.excluded.append((f.path, f"secret: {finding.describe()}"))
                    result.secrets_left_out.append((f.path, finding.describe()))
            result.files = kept
    return result
