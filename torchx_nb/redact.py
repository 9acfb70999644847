"""The one masking of secret-looking values, used wherever a person sees or saves text: CLI lines,
dry runs, describe, statuses, widgets, the static snapshot and its log tail, reprs and the REST
API. The patterns run on RE2, a linear-time engine, so masking any text (a hostile log line
included) costs time linear in its length.

``TOKEN_SHAPES`` (well-known token formats) is shared with the workspace's content scanner, so
what is masked on screen and what is kept out of an image agree."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from enum import Enum
from functools import cache, lru_cache
from typing import Any

MASK = "****"

# names whose values are secrets: DB_PASSWORD, HF_TOKEN, MYSQL_PWD, PGPASS, AccountKey...
_SECRET_NAME = (
    r"secret|token|passw(?:or)?d|passwd|passphrase|pgpass|credential|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|session[_-]?key|account[_-]?key|auth|signature|key|pass|pwd|pin|pat|dsn"
    r"|connection[_-]?string"
)
SECRET_NAME_RE = re.compile(
    r"(secret|token|passw(or)?d|passwd|passphrase|pgpass|credential|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|session[_-]?key|account[_-]?key|auth(?!or)|signature|^key$|_key$"
    r"|(^|[_.-])pass($|[_.-])|(^|[_.-])pwd$|(^|[_.-])pin($|[_.-])|^pat$|_pat$|^dsn$|_dsn$"
    r"|connection[_-]?string)",
    re.IGNORECASE,
)
# camelCase names ending in Key (AccountKey, apiKey, sasKey); case-sensitive, so MONKEY is not
_CAMEL_KEY_RE = re.compile(r"[a-z0-9]Key$")

# Well-known token shapes, masked under any name and looked for in every shipped file.
TOKEN_SHAPES: list[tuple[str, str]] = [
    ("AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    ("GitHub token", r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    ("GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("OpenAI/Anthropic key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"),
    ("Stripe key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("npm token", r"\bnpm_[A-Za-z0-9]{30,}\b"),
    ("PyPI token", r"\bpypi-[A-Za-z0-9_-]{50,}"),
    ("Google API key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("Google OAuth token", r"\bya29\.[A-Za-z0-9_-]{20,}"),
    ("JSON Web Token", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    ("Slack token", r"\bxox[abpr]-[A-Za-z0-9-]{10,}"),
    ("SendGrid key", r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
]
_FLAG_RE = re.compile(r"^-{1,2}[A-Za-z][A-Za-z0-9_-]{0,62}$")


@cache
def _patterns() -> tuple[Any, ...]:
    """The compiled RE2 patterns (compiled on first use: importing this module stays cheap)."""
    import re2

    ident = r"[A-Za-z0-9_.-]"
    value = r"\"[^\"\n]*\"?|'[^'\n]*'?|<[^<>\n]*>|[^\s,;\"'&]+"
    return (
        # a private key block (to its END line, or to the end of the text when cut off)
        re2.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|[\s\S]*)"
        ),
        # scheme://userinfo@host: the userinfo ends at the last '@' before the host (a password
        # may hold '@'), as pip splits it; a lone user part may be a token, so all of it goes
        re2.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/?#\s]+@"),
        # KEY=value, KEY: value, "key": "value" and --key=value, where KEY holds a
        # secret-looking word (checked again in Python: RE2 has no lookaround)
        re2.compile(
            rf"(?i)(^|[^A-Za-z0-9_.-])(-{{0,2}}{ident}*(?:{_SECRET_NAME}){ident}*)([\"']?)"
            rf"(\s*[=:]\s*)({value})"
        ),
        # --key value
        re2.compile(
            rf"(?i)(^|[\s\"'\[,])(-{{1,2}}{ident}*(?:{_SECRET_NAME}){ident}*)()(\s+)({value})"
        ),
        # "Authorization: Bearer X", "-H 'Authorization: token X'", "Basic X"
        re2.compile(
            r"(?i)(^|[^A-Za-z0-9])(bearer|basic|authorization:\s*token)(\s+)([A-Za-z0-9._~+/=-]{8,})"
        ),
        re2.compile("|".join(f"(?:{p})" for _, p in TOKEN_SHAPES)),
    )


def is_secret_key(key: str) -> bool:
    """True for names like ``AWS_SECRET_ACCESS_KEY``, ``db_password``, ``HF_TOKEN``,
    ``MYSQL_PWD``, ``AccountKey`` or a flag like ``--api-key``."""
    name = key.lstrip("-")
    return bool(SECRET_NAME_RE.search(name) or _CAMEL_KEY_RE.search(name))


# a count or a score under a token-ish name (tokens=512, token_acc: 0.93) is not a secret; a
# number under a password-ish name may be
_NUMBER_RE = re.compile(r"^[-+]?[0-9][0-9_.eE+-]{0,19}$")
_PASSWORD_RE = re.compile(r"(?i)pass|pwd|pin|secret")
# values that stand for a secret without being one: KEY=VALUE, <token>, ${PASSWORD}, $PASS, ****
_PLACEHOLDER_RE = re.compile(r"^(VALUE|\.\.\.|\*+|<[^>]*>|\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*)$")


def _assign(m: Any) -> str:
    before, key, quote, sep, val = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
    if not is_secret_key(key) or (not sep.strip() and val.startswith("-")):
        return str(m.group(0))
    bare = val.strip("\"'")
    if _PLACEHOLDER_RE.match(bare) or (_NUMBER_RE.match(bare) and not _PASSWORD_RE.search(key)):
        return str(m.group(0))
    if ":" in sep and not quote and bare.isalpha() and len(bare) < 8:
        return str(m.group(0))  # prose ("credentials: no GCP credentials"), not "password: s3cr3t"
    q = val[0] if val[:1] in "\"'" and len(val) > 1 and val[-1] == val[0] else ""
    return f"{before}{key}{quote}{sep}{q}{MASK}{q}"


def _credential(m: Any) -> str:
    """``Bearer X`` / ``Authorization: token X`` always; ``Basic X`` only when X looks encoded
    (a digit, ``+/=`` or a capital inside), so "basic configuration" stays prose."""
    scheme, value = m.group(2), m.group(4)
    if scheme.lower() == "basic" and not re.search(r"[0-9+/=]|.[A-Z]", value):
        return str(m.group(0))
    return f"{m.group(1)}{scheme}{m.group(3)}{MASK}"


def mask_url(text: str) -> str:
    """``text`` with the credentials of every URL in it masked, pip's rule:
    ``https://user:p@ss@host/simple`` and ``https://t0ken@host/simple`` both become
    ``https://****@host/simple`` (the userinfo ends at the last ``@`` before the host; a lone
    user part may be a token). The one URL masking: ``redact_text`` and the package-index
    messages both use it."""
    if not text:
        return text
    try:
        return str(_patterns()[1].sub(lambda m: f"{m.group(1)}{MASK}@", text))
    except UnicodeEncodeError:  # a lone surrogate: see _utf8
        return mask_url(_utf8(text))


def _utf8(text: str) -> str:
    """``text`` with each lone surrogate (an undecodable byte the OS's surrogateescape kept,
    in a file name or an environment value) written as its escape: RE2 reads UTF-8 only."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def redact_text(text: str) -> str:
    """``text`` with the values of secret-looking names, token shapes, private keys,
    ``Authorization`` credentials and URL credentials (``mask_url``) masked."""
    if not text:
        return text
    if type(text) is not str:
        text = text[:]  # a str subclass (a str-valued Enum): its characters as a plain str
    if len(text) <= CACHED_CHARS:
        return _redact_short(text)
    return _redact(text)


#: texts this long or shorter are masked once and remembered (a watcher's every poll masks
#: each job's same state text, message and URL again: six RE2 passes each, most of a poll's
#: CPU for twenty local jobs); the patterns never change in a process
CACHED_CHARS = 2048


@lru_cache(maxsize=4096)
def _redact_short(text: str) -> str:
    return _redact(text)


def _redact(text: str) -> str:
    try:
        return _masked(text)
    except UnicodeEncodeError:  # a lone surrogate: see _utf8
        return _masked(_utf8(text))


def _masked(text: str) -> str:
    private_key, _url, assign, flag, scheme, shapes = _patterns()
    out = private_key.sub(MASK, text)
    out = mask_url(out)
    out = flag.sub(_assign, out)
    out = assign.sub(_assign, out)
    out = scheme.sub(_credential, out)
    return str(shapes.sub(MASK, out))


_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----")
_KEY_END = re.compile(r"-----END [A-Z ]{0,40}PRIVATE KEY-----")
KEY_BLOCK_MAX_LINES = 200


class LineMasker:
    """Masks a log one line at a time, as ``redact_text`` does, and also the lines between a
    private key's BEGIN and END lines (at most KEY_BLOCK_MAX_LINES of them), which no single
    line gives away. One per stream of lines."""

    def __init__(self) -> None:
        self._inside = 0

    def __call__(self, line: str) -> str:
        if self._inside:
            self._inside = 0 if _KEY_END.search(line) else self._inside - 1
            return MASK + ("\n" if line.endswith("\n") else "")
        if _KEY_BEGIN.search(line) and not _KEY_END.search(line):
            self._inside = KEY_BLOCK_MAX_LINES
        return redact_text(line)


def redact_lines(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` (a log) masked line by line with one ``LineMasker``."""
    mask = LineMasker()
    return (mask(line) for line in lines)


def redact(obj: Any) -> Any:
    """A copy of a JSON-like structure with secret-looking values masked. Dicts whose key looks
    secret, ``{"name": K, "value": V}`` and ``{"Key": K, "Value": V}`` pairs (AWS env lists and
    tags: only V is masked, and only when K looks secret), argument lists (``["--password",
    "x"]``: the value after a secret-looking flag) and strings are all handled."""
    if isinstance(obj, dict):
        name = _pair_name(obj)
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if name is not None and isinstance(k, str) and k.lower() in ("name", "key"):
                out[k] = v
            elif name is not None and isinstance(k, str) and k.lower() == "value":
                out[k] = MASK if is_secret_key(name) else redact(v)
            elif isinstance(k, str) and is_secret_key(k) and isinstance(v, (str, int, float)):
                out[k] = MASK
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, (list, tuple)):
        items: list[Any] = []
        after_flag = False
        for v in obj:
            if after_flag and isinstance(v, str) and not v.startswith("-"):
                items.append(MASK)
            else:
                items.append(redact(v))
            after_flag = isinstance(v, str) and bool(_FLAG_RE.match(v)) and is_secret_key(v)
        return tuple(items) if isinstance(obj, tuple) else items
    if isinstance(obj, Enum):
        return obj
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def _pair_name(obj: dict[Any, Any]) -> str | None:
    """K of a ``{"name"|"Key": K, "value"|"Value": V}`` pair, else None."""
    keys = {k.lower(): k for k in obj if isinstance(k, str)}
    if "value" not in keys:
        return None
    for label in ("name", "key"):
        if label in keys and isinstance(obj[keys[label]], str):
            return str(obj[keys[label]])
    return None
