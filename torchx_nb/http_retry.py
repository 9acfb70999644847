"""The one retry policy of every HTTP call torchx_nb makes itself (registry pushes, package
index pages, webhook notices): urllib3's ``Retry``, exponential backoff, ``Retry-After``
honoured on a 429 or 503. requests sessions get it through their adapter (``session``);
urllib3 callers that drive the tries themselves (the notice thread) take ``policy``.

Only idempotent methods are retried on a transient answer unless a caller says otherwise
(a notice, a POST, carries an ``Idempotency-Key``). Cloud SDKs keep their own retries (boto3's
adaptive mode, google.api_core's ``Retry``)."""

from __future__ import annotations

import functools
from typing import Any

TRIES = 4  # one request and three retries: after 0, 1 and 2 s
BACKOFF_S = 0.5  # urllib3's backoff factor
BACKOFF_MAX_S = 16.0
TRANSIENT = frozenset({429, 500, 502, 503, 504})  # answers worth another try
RETRY_AFTER_MAX_S = 30.0  # a longer Retry-After is the answer now, not a wait


@functools.cache
def _retry_class() -> Any:
    """urllib3's ``Retry`` with two edges of its ``Retry-After`` handling made ours: a value
    that is neither seconds nor a date is no answer to honour (the backoff alone paces the
    next try; urllib3 raised ``InvalidHeader`` out of the request), and a wait longer than
    ``RETRY_AFTER_MAX_S`` gives the answer at once (urllib3 slept up to six hours per try)."""
    import urllib3
    from urllib3.exceptions import InvalidHeader, MaxRetryError

    class Policy(urllib3.Retry):
        def get_retry_after(self, response: Any) -> float | None:
            try:
                return super().get_retry_after(response)
            except InvalidHeader:
                return None

        def increment(
            self,
            method: Any = None,
            url: Any = None,
            response: Any = None,
            error: Any = None,
            _pool: Any = None,
            _stacktrace: Any = None,
        ) -> Any:
            if response is not None and self.respect_retry_after_header:
                wait = self.get_retry_after(response)
                if wait is not None and wait > RETRY_AFTER_MAX_S:
                    raise MaxRetryError(_pool, str(url), None)
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return Policy


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

    return _retry_class()(
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
