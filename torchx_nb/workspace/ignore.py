"""``.dockerignore`` / ``.torchxignore`` patterns with Docker's semantics.

Docker (moby's patternmatcher) differs from gitignore: patterns are anchored at the workspace
root, ``*`` and ``?`` never cross ``/``, ``**`` spans any number of directories, a path is
excluded when it *or one of its parent directories* matches, ``!`` re-includes, and the last
matching pattern wins. pathspec implements gitignore, not this, so the matcher is our own."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    """One ignore line: its text, whether it re-includes (``!``), and its compiled form."""

    text: str
    negate: bool
    regex: re.Pattern[str]
    source: str = ""

    @property
    def literal_head(self) -> str | None:
        """The pattern's first path component if it has no wildcard, else None."""
        head = self.text.split("/", 1)[0]
        return None if any(c in head for c in "*?[\\") else head


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    out.append("(?:.*/)?")
                    i += 1
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                if body.startswith("^") or body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "^" + "".join(out) + "$"


def parse_patterns(lines: Iterable[str], source: str = "") -> list[Pattern]:
    """Compile ignore-file lines; comments, blank lines and ``.`` are skipped."""
    out: list[Pattern] = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:].strip()
        line = posixpath.normpath(line).lstrip("/")
        line = re.sub(r"\*{3,}", "**", line)
        line = re.sub(r"(?:\*\*/){2,}", "**/", line)
        if line in ("", "."):
            continue
        try:
            regex = re.compile(_translate(line))
        except re.error as e:
            from torchx_nb.specs.api import TorchxNbError

            where = f"{source}: " if source else ""
            raise TorchxNbError(
                f"{where}bad pattern {raw.strip()!r} ({e}); fix or remove that line"
            ) from None
        out.append(Pattern(line, negate, regex, source))
    return out


def _candidates(path: str) -> list[str]:
    """``a/b/c`` → ``["a/b/c", "a/b", "a"]``: a path matches if it or a parent does."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


class Matcher:
    """Decides, for a workspace-relative posix path, which pattern (if any) excludes it."""

    def __init__(self, patterns: list[Pattern]) -> None:
        self.patterns = patterns
        self.has_negations = any(p.negate for p in patterns)

    def excluded_by(self, path: str) -> Pattern | None:
        """The last matching pattern if it excludes ``path``, else None."""
        verdict: Pattern | None = None
        candidates = _candidates(path)
        for p in self.patterns:
            if any(p.regex.match(c) for c in candidates):
                verdict = None if p.negate else p
        return verdict

    def reincluded(self, path: str) -> bool:
        """Whether the last pattern matching ``path`` is a ``!`` line: the user asked for it."""
        verdict = False
        candidates = _candidates(path)
        for p in self.patterns:
            if any(p.regex.match(c) for c in candidates):
                verdict = p.negate
        return verdict

    def may_reinclude_under(self, directory: str) -> bool:
        """Whether some ``!`` pattern could match a path inside ``directory`` (so an excluded
        directory must still be walked)."""
        if not self.has_negations:
            return False
        head = directory.split("/", 1)[0]
        for p in self.patterns:
            if not p.negate:
                continue
            lit = p.literal_head
            if lit is None or lit == head:
                return True
        return False
