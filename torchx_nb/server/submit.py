"""``POST /torchx-nb/api/jobs``: the body that asks to run a notebook as a job, checked before
anything is built or submitted: against the request body schema of openapi.json (types,
names, lengths: the document is the one truth), then the notebook, an existing ``.ipynb`` under
the server's root (no path out of it, by ``..`` or by a link). Anything else is one line naming
the field, for a 400."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchx_nb.server.schema import DoesNotConform, check_body
from torchx_nb.specs.exceptions import BadSubmission as BadSubmission

MAX_BODY = 64 * 1024
PATH = "/torchx-nb/api/jobs"


@dataclass(frozen=True)
class NotebookSubmission:
    """A checked request to run a notebook: its absolute path and the run's settings."""

    notebook: str
    parameters: dict[str, Any] = field(default_factory=dict)
    scheduler: str | None = None
    cfg: dict[str, Any] = field(default_factory=dict)
    typed_cfg: str | None = None  # the options as typed, read by -cfg's parser
    image: str | None = None
    resource: str | None = None
    name: str | None = None
    cell_timeout: float | None = None
    typed: frozenset[str] = frozenset()  # the names given in typed_parameters (for errors)


def notebook_under_root(value: Any, root_dir: str | None) -> str:
    """The absolute path of the notebook ``value`` names under the server's root (checked:
    relative, under the root by ``..`` or by a link, an existing ``.ipynb``)."""
    if not isinstance(value, str) or not value or "\0" in value or len(value) > 4096:
        raise BadSubmission("notebook must be the path of a .ipynb file under the server's root")
    if root_dir is None:
        raise BadSubmission("this server has no root folder to run notebooks from")
    root = Path(root_dir).expanduser().resolve()
    given = Path(value)
    if given.is_absolute():
        raise BadSubmission("notebook must be a path relative to the server's root")
    path = (root / given).resolve()
    if not path.is_relative_to(root):
        raise BadSubmission("notebook must be under the server's root")
    if path.suffix != ".ipynb":
        raise BadSubmission("notebook must be a .ipynb file")
    if not path.is_file():
        raise BadSubmission(f"notebook {value!r} does not exist")
    return str(path)


MAX_DEPTH = 100  # levels of lists and objects a parameter's value may nest


def _depth(value: Any) -> int:
    """How deep ``value`` nests (without recursion: the value may be deep)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list, tuple, set, frozenset)):
            deepest = max(deepest, level)
            todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _not_utf8(value: Any) -> bool:
    """Whether ``value`` holds text that is not UTF-8 (a lone surrogate, ``"\\ud800"`` in JSON:
    no file name, store row or environment variable can take it), without recursion."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return False


def _lone_surrogate(body: Any) -> None:
    """A field holding a lone surrogate is refused, named (``parameters.NAME``, ``cfg.KEY``
    inside those): it passed every check and failed after the submit, a 500 (a job name's
    was submitted and never recorded)."""
    for name, value in body.items() if isinstance(body, dict) else ():
        if not _not_utf8([name, value]):
            continue
        inner = (
            [k for k, v in value.items() if _not_utf8([k, v])] if isinstance(value, dict) else []
        )
        where = f"{name}.{inner[0]}" if inner else str(name)
        where = where.encode("utf-8", "backslashreplace").decode()[:80]
        raise BadSubmission(
            f"{where} holds a lone surrogate (a \\ud800-\\udfff escape): send UTF-8 text"
        )


def _deepest_field(raw: bytes) -> str:
    """The top-level field (``parameters.NAME`` inside parameters) where JSON too deep to
    parse goes deepest, read by a scan of the text (strings skipped)."""
    import re

    text = raw.decode("utf-8", "replace")
    keys: list[str | None] = []  # the key each open object/array level was entered under
    last_key: str | None = None
    deepest: tuple[int, list[str | None]] = (0, [])
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"\s*:?|[\[\]{}]', text):
        token = m.group()
        if token in "[{":
            keys.append(last_key)
            last_key = None
            if len(keys) > deepest[0]:
                deepest = (len(keys), list(keys))
        elif token in "]}":
            if keys:
                keys.pop()
        elif token.endswith(":"):
            with contextlib.suppress(ValueError):
                last_key = json.loads(token[:-1].strip())
    path = [k for k in deepest[1][1:3] if k is not None]
    return ".".join(path) if path else "the body"


def _no_constant(name: str) -> Any:
    raise BadSubmission(f"the body must be JSON ({name} is not a JSON number)")


def _int(text: str) -> int:
    """A JSON integer, or one line for one over Python's digit limit for int text (it was
    'the body must be JSON', as if the JSON were wrong)."""
    import sys

    digits = sum(c.isdigit() for c in text)
    if digits > sys.get_int_max_str_digits() > 0:
        raise BadSubmission(
            f"an integer of {digits} digits is over Python's limit for int text"
            f" ({sys.get_int_max_str_digits()}); send it as a string (typed_parameters reads"
            " one as -p does), or compute it in the notebook"
        )
    return int(text)


def _parameters(body: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` (JSON values) with ``typed_parameters`` (text as a user typed it in
    the dialog) read as ``-p`` reads it: a Python literal, else the text itself."""
    from torchx_nb.components.notebook_parameters import read_value

    values = dict(body.get("parameters") or {})
    for name, text in (body.get("typed_parameters") or {}).items():
        if name in values:
            raise BadSubmission(f"typed_parameters.{name}: also in parameters; give it once")
        try:
            values[name] = read_value(text)
        except ValueError as e:
            raise BadSubmission(f"typed_parameters.{name}: {e}") from None
        if _depth(values[name]) > MAX_DEPTH:
            raise BadSubmission(
                f"typed_parameters.{name} nests too deep: at most {MAX_DEPTH} levels"
            )
    return values


def parse_submission(raw: bytes, root_dir: str | None) -> NotebookSubmission:
    """The checked submission in ``raw`` (JSON); ``BadSubmission`` otherwise."""
    if len(raw) > MAX_BODY:
        raise BadSubmission(f"the body is over {MAX_BODY // 1024} KiB")
    try:
        body = json.loads(raw or b"null", parse_constant=_no_constant, parse_int=_int)
    except BadSubmission:  # a ValueError too: its own words (NaN, a too long int)
        raise
    except ValueError:
        raise BadSubmission("the body must be JSON") from None
    except RecursionError:
        raise BadSubmission(
            f"{_deepest_field(raw)} nests too deep: at most {MAX_DEPTH} levels"
        ) from None
    given = body.get("parameters") if isinstance(body, dict) else None
    for name, value in given.items() if isinstance(given, dict) else ():
        if isinstance(value, (dict, list)) and _depth(value) > MAX_DEPTH:
            raise BadSubmission(f"parameters.{name} nests too deep: at most {MAX_DEPTH} levels")
    _lone_surrogate(body)
    try:
        check_body(PATH, "post", body)
    except DoesNotConform as e:
        raise BadSubmission(str(e)) from None
    timeout = body.get("cell_timeout")
    return NotebookSubmission(
        notebook=notebook_under_root(body["notebook"], root_dir),
        parameters=_parameters(body),
        scheduler=body.get("scheduler") or None,
        cfg=dict(body.get("cfg") or {}),
        typed_cfg=(body.get("typed_cfg") or "").strip() or None,
        image=body.get("image") or None,
        resource=body.get("resource") or None,
        name=body.get("name") or None,
        cell_timeout=float(timeout) if timeout is not None else None,
        typed=frozenset(body.get("typed_parameters") or ()),
    )


__all__ = ["BadSubmission", "NotebookSubmission", "notebook_under_root", "parse_submission"]
