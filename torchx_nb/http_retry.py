"""The one retry policy of every HTTP call torchx_nb makes itself (registry pushes, package
index pages, webhook notices): urllib3's ``Retry``, exponential backoff, ``Retry-After``
honoured on a 429 or 503. requests sessions get it through their adapter (``session``);
urllib3 callers that drive the tries themselves (the notice thread) take ``policy``.

Only idempotent methods are retried on a transient answer unless a caller says otherwise
(a notice, a POST, carries an ``Idempotency-Key``). Cloud SDKs keep their own retries (boto3's
adaptive mode, google.api_core's ``Retry``)."""

from __future__ import annotations

from typing import Any

TRIES = 4  # one request and three retries: after 0, 1 and 2 s
BACKOFF_S = 0.5  # urllib3's backoff factor
BACKOFF_MAX_S = 16.0
TRANSIENT = frozenset({429, 500, 502, 503, 504})  # answers worth another try


def policy(
    tries: int = TRIES,
    backoff: float = BACKOFF_S,
    every_method: bool = False,
) -> Any:
    """urllib3's ``Retry``: ``tries`` in all, ``backoff`` as its factor (capped at
    ``BACKOFF_MAX_S``), connection errors and ``TRANSIENT`` answers retried, redirects left to
    the caller, the last answer returned rather than raised. ``every_method``: POST and PATCH
    retried too (only for a request that is safe to repeat)."""
    import urllib3

    return urllib3.Retry(
        total=tries - 1,
        backoff_factor=backoff,
        backoff_max=BACKOFF_MAX_S,
        redirect=False,
        status_forcelist=TRANSIENT,
        allowed_methods=None if every_method else urllib3.Retry.DEFAULT_ALLOWED_METHODS,
        raise_on_status=False,
        respect_retry_after_header=True,
    )


def session(pool_connections: int = 10, pool_maxsize: int = 10) -> Any:
    """A requests ``Session`` whose http and https adapters retry by ``policy()``."""
    import requests
    from requests.adapters import HTTPAdapter

    s = requests.Session()
    for scheme in ("http://", "https://"):
        s.mount(
            scheme,
            HTTPAdapter(
                pool_connections=pool_connections, pool_maxsize=pool_maxsize, max_retries=policy()
            ),
        )
    return s
