"""Which files of a workspace ship with a job: the ignore file's rules, after built-in excludes
for secrets and clutter that apply unless the ignore file re-includes them with ``!``."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.ignore import Matcher, Pattern, parse_patterns

IGNORE_FILES = (".torchxignore", ".dockerignore")
DOCKERFILE = "Dockerfile.torchx"
DEFAULT_MAX_BYTES = 2 * 1024**3

SECRET_PATTERNS = [
    ".aws",
    ".azure",
    ".gcloud",
    ".config/gcloud",
    ".kube",
    ".ssh",
    ".gnupg",
    ".docker/config.json",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".env",
    ".env.*",
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/id_rsa*",
    "**/id_dsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/credentials.json",
    "**/*.kdbx",
    "**/.aws",
    "**/.ssh",
    # tool credential stores, as found in a home folder (SageMaker Studio's workspace)
    "**/.huggingface",
    "**/.cache/huggingface",
    "**/.config/gh",
    "**/.config/hub",
    "**/.config/gcloud",
    "**/.config/rclone",
    "**/.config/wandb",
    "**/.pgpass",
    "**/.my.cnf",
    "**/.s3cfg",
    "**/.boto",
    "**/.vault-token",
    "**/.databrickscfg",
    "**/.kaggle",
    "**/.terraform.d",
    "**/.password-store",
    "**/.local/share/keyrings",
    "**/.git-credentials",
    "**/.dockercfg",
    "**/.docker",
    # Jupyter's runtime files (kernel connection files carry signing keys), its config
    # (tokens, password hashes) and data folder (our own job store, logs and requests)
    "**/.local/share/jupyter",
    "**/.jupyter",
    "**/jupyter/runtime",
    "**/.ipython/profile_*/history.sqlite",
    "**/.torchx_nb",
    # shell and REPL histories
    "**/.*_history",
    "**/.*history",
    "**/.lesshst",
    "**/.viminfo",
]
CLUTTER_PATTERNS = [
    ".git",
    ".hg",
    ".svn",
    "**/.ipynb_checkpoints",
    "**/__pycache__",
    "**/*.pyc",
    ".venv",
    "venv",
    "**/node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "**/.DS_Store",
    ".cache",
]


class SecretShippedWarning(UserWarning):
    """A secret-looking file ships because the ignore file re-included it."""


class WorkspaceError(TorchxNbError):
    """The workspace cannot be packaged (missing, too large, unreadable)."""


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

    def secret_warnings(self) -> list[str]:
        """One line per secret-looking file that ships because the ignore file re-included it."""
        return [
            f"{path} looks like a secret ({rule}) and ships because {self.ignore_file}"
            " re-includes it; remove the '!' line unless the job needs it"
            for path, rule in self.shipped_secrets
        ]

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
        if self.excluded:
            lines.append(f"left out ({len(self.excluded)}):")
            for path, why in self.excluded[:max_rows]:
                lines.append(f"  {path}  [{why}]")
            if len(self.excluded) > max_rows:
                lines.append(f"  ... and {len(self.excluded) - max_rows} more")
        return "\n".join(lines)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _reason(p: Pattern) -> str:
    return p.source if p.source in ("secret", "clutter") else f"{p.source}: {p.text}"


def _own_state(base: Path) -> list[str]:
    """Root-relative patterns for torchx_nb's data folder, the job store and Jupyter's runtime
    folder when they lie inside the workspace wherever they were moved to."""
    import contextlib

    from torchx_nb.paths import data_dir

    places: list[Path] = [data_dir()]
    with contextlib.suppress(Exception):
        from torchx_nb.jobstore import default_path

        places.append(default_path())
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
) -> WorkspaceFiles:
    """List the files of ``root`` that ship with a job."""
    base = Path(root).expanduser().resolve()
    if not base.is_dir():
        raise WorkspaceError(f"workspace {str(root)!r} is not a folder")
    patterns: list[Pattern] = []
    secrets = Matcher(parse_patterns(SECRET_PATTERNS + _own_state(base), "secret"))
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
        keep_dirs = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            full = Path(dirpath) / d
            if full.is_symlink():
                filenames.append(d)
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
                result.shipped_secrets.append((rel, secret_rule.text))
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
    return result
