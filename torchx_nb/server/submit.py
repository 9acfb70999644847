"""``POST /torchx-nb/api/jobs``: the body that asks to run a notebook as a job, checked field
by field before anything is built or submitted. A notebook is an existing ``.ipynb`` under the
server's root (no path out of it, by ``..`` or by a link); the scheduler is one this server
knows; every value has its type. Anything else is one line naming the field, for a 400."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_BODY = 64 * 1024
FIELDS = {"notebook", "parameters", "scheduler", "cfg", "image", "resource", "name", "cell_timeout"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_CFG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")
_PLAIN = re.compile(r"[^\s\x00-\x1f\x7f]{1,500}")


class BadSubmission(ValueError):
    """The body cannot be run: the one-line reason names the field."""


@dataclass(frozen=True)
class NotebookSubmission:
    """A checked request to run a notebook: its absolute path and the run's settings."""

    notebook: str
    parameters: dict[str, Any] = field(default_factory=dict)
    scheduler: str | None = None
    cfg: dict[str, Any] = field(default_factory=dict)
    image: str | None = None
    resource: str | None = None
    name: str | None = None
    cell_timeout: float | None = None


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _PLAIN.fullmatch(value):
        raise BadSubmission(f"{key} must be text without spaces or control characters")
    return value


def _cfg_value(key: str, value: Any) -> Any:
    if isinstance(value, bool) or (isinstance(value, str) and len(value) <= 2000):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value
    if isinstance(value, list) and all(isinstance(v, str) and len(v) <= 2000 for v in value):
        return value
    raise BadSubmission(f"cfg.{key} must be text, a number, true/false or a list of text")


def _notebook(value: Any, root_dir: str | None) -> str:
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


def parse_submission(raw: bytes, root_dir: str | None) -> NotebookSubmission:
    """The checked submission in ``raw`` (JSON); ``BadSubmission`` otherwise."""
    if len(raw) > MAX_BODY:
        raise BadSubmission(f"the body is over {MAX_BODY // 1024} KiB")
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        raise BadSubmission("the body must be JSON") from None
    if not isinstance(body, dict):
        raise BadSubmission("the body must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadSubmission(f"unknown field {unknown[0]!r}: fields are {', '.join(sorted(FIELDS))}")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadSubmission("parameters must be an object of NAME: value")
    for name in params:
        if not _NAME.fullmatch(name) or name.startswith("__"):
            raise BadSubmission(f"parameters.{name[:60]} is not a Python variable name")
    cfg = body.get("cfg") or {}
    if not isinstance(cfg, dict):
        raise BadSubmission("cfg must be an object of option: value")
    for key in cfg:
        if not _CFG_KEY.fullmatch(key):
            raise BadSubmission(f"cfg.{key[:60]} is not an option name")
    timeout = body.get("cell_timeout")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise BadSubmission("cell_timeout must be a number of seconds above 0")
    scheduler = _text(body, "scheduler")
    if scheduler is not None and not re.fullmatch(r"[a-z0-9_]{1,64}", scheduler):
        raise BadSubmission("scheduler must be a scheduler's name")
    return NotebookSubmission(
        notebook=_notebook(body.get("notebook"), root_dir),
        parameters=dict(params),
        scheduler=scheduler,
        cfg={k: _cfg_value(k, v) for k, v in cfg.items()},
        image=_text(body, "image"),
        resource=_text(body, "resource"),
        name=_text(body, "name"),
        cell_timeout=float(timeout) if timeout is not None else None,
    )


__all__ = ["BadSubmission", "NotebookSubmission", "parse_submission"]
