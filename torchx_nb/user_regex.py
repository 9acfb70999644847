"""Regular expressions that users type (log filters, ``--regex``, the panel's search) run on RE2,
a linear-time engine: no pattern, however hostile (``(a+)+$``), can stall a kernel or a server
for longer than one pass over the text. RE2 has no backreferences or lookaround."""

from __future__ import annotations

from typing import Any, Protocol

from torchx_nb.specs.exceptions import BadRegex as BadRegex

MAX_PATTERN = 1000


class Pattern(Protocol):
    """What RE2's compiled pattern offers (a subset of ``re.Pattern``)."""

    pattern: str
    groups: int
    groupindex: dict[str, int]

    def search(self, text: str) -> Any: ...


def compile_regex(pattern: str) -> Pattern:
    """``pattern`` compiled with RE2, or ``BadRegex`` naming the problem."""
    import re2

    if len(pattern) > MAX_PATTERN:
        raise BadRegex(f"regular expression is {len(pattern)} characters; at most {MAX_PATTERN}")
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except UnicodeEncodeError:  # a lone surrogate (an undecodable byte kept by the shell)
        raise BadRegex(
            f"regular expression {pattern[:60]!r}"  # repr shows the byte as its escape
            " holds a byte that is not UTF-8: give the pattern as UTF-8 text"
        ) from None
    except re2.error as e:
        why = e.args[0] if e.args else e
        why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        raise BadRegex(
            f"bad regular expression {shown!r}: {why} [RE2 syntax: no backreferences or lookaround]"
        ) from None
