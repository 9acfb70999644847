"""One notice when a job ends: a webhook (``$TORCHX_NB_NOTIFY_URL`` or ``.torchxconfig``'s
``[notify] url``) gets JSON with the handle, name, state, duration and, for a failed job, its
first failure card, plus a Slack-compatible ``text`` and a stable ``notice_id`` (also the ``Idempotency-Key``
header). It is POSTed with urllib3: 307/308 followed keeping the POST, 301/302/303 not
(one warning), ``user:pass@`` sent as basic auth.

Whichever watcher sees the end first sends it (the Jupyter server's poller, a kernel's poller,
a CLI waiting on the job): the notice is owed in the job store's outbox and leased before it is
sent, so two watchers never both send it; the lease is renewed while a delivery is in flight
and runs out only when its process died, and then any later process sends it again with the
same ``notice_id``. Sending runs on sender threads of their own (a few at once), retried with
backoff while the process lives, so a slow or failing webhook never holds up a watcher nor the
other notices; a delivery given up on stays owed, and is one line in the cell that submitted
the job (or the CLI's stderr). Everything in the payload is masked, and so is the URL
wherever it is shown."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from torchx_nb import http_retry
from torchx_nb.redact import redact, redact_text
from torchx_nb.specs.exceptions import NotifyError as NotifyError
from torchx_nb.specs.exceptions import WebhookAnswer as WebhookAnswer
from torchx_nb.specs.failure import FailureCard

NOTIFY_ENV = "TORCHX_NB_NOTIFY_URL"
TRIES = 6  # one POST and five retries, while the process lives
BACKOFF_S = 0.5  # urllib3's backoff factor: retries after 0, 1, 2, 4 and 8 s
CONNECT_TIMEOUT_S = 10.0  # a webhook that does not take the connection: tried again
# how long a webhook that took the notice may take to answer: a read timeout is no proof
# it was not received, and each try after one is a repeat it must drop by its key
READ_TIMEOUT_S = 120.0
REDIRECTS = 5


def notify_url() -> str | None:
    """Where notices go: ``$TORCHX_NB_NOTIFY_URL``, else ``[notify] url`` in .torchxconfig;
    None: no notices."""
    url = os.environ.get(NOTIFY_ENV)
    if url is None:
        from torchx_nb.config import read_section

        url = read_section("notify").get("url")
    url = (url or "").strip()
    if not url:
        return None
    if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
        raise NotifyError(
            f"the notice URL {shown_url(url)!r} is not an http(s) URL: fix {NOTIFY_ENV} or"
            " [notify] url in .torchxconfig"
        )
    if _host(url) is None:  # urllib3's own message would quote the text: a user and password
        raise NotifyError(
            f"the notice URL {shown_url(url)!r} has no host urllib3 can read: a / # or ? in"
            " its user or password must be percent-encoded (%2F %23 %3F); fix"
            f" {NOTIFY_ENV} or [notify] url in .torchxconfig"
        )
    return url


def _host(url: str) -> str | None:
    """``host[:port]`` as urllib3 reads the URL (without its ``user:pass@``); None when it
    reads none (a ``/`` in a password cuts the host short)."""
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    try:
        parsed = parse_url(url)
    except (LocationParseError, ValueError):
        return None
    if not parsed.host:
        return None
    return f"{parsed.host}:{parsed.port}" if parsed.port is not None else parsed.host


def shown_url(url: str) -> str:
    """The URL as it may be shown: a webhook's path is its secret (Slack, Teams), so only the
    scheme and host are kept — the host as urllib3 reads it, or nothing (a URL whose
    ``user:pass@`` it cannot read would show a piece of the password)."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        return "****"
    return f"{scheme}{sep}{_host(url) or '****'}/****"


def payload(
    handle: str,
    name: str,
    state: str,
    duration: float | None,
    cards: list[FailureCard],
) -> dict[str, Any]:
    """What the webhook receives, masked; ``text`` is what a Slack-style hook shows."""
    minutes, seconds = divmod(int(duration or 0), 60)
    took = f"{minutes}:{seconds:02d}"
    text = f"{name} ({handle}) {state} after {took}"
    failure = cards[0].to_json() if cards else None
    if cards:
        text += f": {cards[0].headline()}"
        if cards[0].last_lines:
            text += "\n```\n" + "\n".join(cards[0].last_lines[-5:]) + "\n```"
    body = {
        "notice_id": notice_id(handle),
        "handle": handle,
        "name": name,
        "state": state,
        "duration": duration,
        "failure": failure,
        "text": text,
    }
    masked: dict[str, Any] = redact(body)
    masked["text"] = redact_text(text)
    return bounded(masked)


MAX_BODY_BYTES = 32_000  # a chat webhook refuses more (Slack cuts text at 40,000 characters)


def bounded(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` cut to ``MAX_BODY_BYTES`` of JSON: the card's last lines go first, then the
    text is shortened (cards are bounded already: this is the last guard)."""
    from torchx_nb.specs.failure import clean_line

    if len(json.dumps(body).encode()) <= MAX_BODY_BYTES:
        return body
    if isinstance(body.get("failure"), dict):
        body["failure"] = {**body["failure"], "last_lines": []}
    body["text"] = clean_line(str(body.get("text") or "").split("\n", 1)[0], 2000)
    for key in ("name", "handle"):
        body[key] = clean_line(str(body.get(key) or ""), 1000)
    return body


def retry_policy() -> Any:
    """A notice's retries: the project's one policy (``torchx_nb.http_retry``), ``TRIES`` in
    all with ``BACKOFF_S`` as its factor, every failure retried (a notice is a POST that
    carries an ``Idempotency-Key``); a ``Retry-After`` on a 429 or 503 is honoured by ``post``
    reading it with the same class, up to ``RETRY_AFTER_MAX_S``: a longer one is the answer."""
    return http_retry.policy(TRIES, BACKOFF_S, every_method=True)


def notice_id(handle: str) -> str:
    """The notice's stable id (one per job end, the same in every process that sends it): a
    receiver drops a repeat by it (``notice_id`` in the body, the ``Idempotency-Key`` header)."""
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"torchx-nb-notice:{handle}"))


def _target(url: str) -> tuple[str, dict[str, str]]:
    """The URL without its ``user:pass@`` part, and that part as a basic-auth header."""
    from urllib.parse import unquote

    from urllib3.util import make_headers, parse_url

    parsed = parse_url(url)
    if not parsed.auth:
        return url, {}
    user, _, password = parsed.auth.partition(":")
    bare = parsed._replace(auth=None).url
    return bare, dict(make_headers(basic_auth=f"{unquote(user)}:{unquote(password)}"))


def _origin(url: str) -> tuple[str, str, int | None]:
    """A URL's origin (scheme, host, port with its scheme's default): credentials are sent
    only to the origin they were given for, as browsers and requests do."""
    from urllib3.util import parse_url

    parsed = parse_url(url)
    scheme = (parsed.scheme or "http").lower()
    return (
        scheme,
        (parsed.host or "").lower(),
        parsed.port or {"http": 80, "https": 443}.get(scheme),
    )


def post(url: str, body: dict[str, Any]) -> None:
    """One POST of ``body`` as JSON (urllib3); a 2xx answer is the webhook's acknowledgement.
    A 307/308 is followed keeping the POST and its body (at most ``REDIRECTS`` hops, counted
    by urllib3's ``Retry``; credentials are not sent to another origin); a 301/302/303 is not
    followed (a client would re-send it as a GET without its body) and raises
    ``WebhookAnswer(final=True)``; any other answer, or no answer, raises."""
    from urllib.parse import urljoin

    import urllib3  # here: a command that sends no notice does not pay for it

    target, auth = _target(url)
    headers = {"Content-Type": "application/json", "User-Agent": "torchx_nb", **auth}
    if body.get("notice_id"):
        headers["Idempotency-Key"] = str(body["notice_id"])
    data = json.dumps(body).encode()
    hops = urllib3.Retry(total=None, redirect=REDIRECTS, raise_on_redirect=True)
    with urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S), retries=False
    ) as pool:
        while True:
            resp = pool.request("POST", target, body=data, headers=headers, redirect=False)
            if 200 <= resp.status < 300:
                return
            location = resp.headers.get("Location")
            if resp.status in (307, 308) and location:
                try:
                    hops = hops.increment("POST", target, response=resp)
                except urllib3.exceptions.MaxRetryError:
                    raise WebhookAnswer(
                        f"the webhook redirected the notice more than {REDIRECTS} times"
                    ) from None
                next_url = urljoin(target, location)
                if _origin(next_url) != _origin(target):
                    headers = {
                        k: v
                        for k, v in headers.items()
                        if k.lower() not in hops.remove_headers_on_redirect
                    }
                target = next_url
                continue
            if resp.status in (301, 302, 303):
                raise WebhookAnswer(
                    f"the webhook answered {resp.status} (a redirect that would re-send the"
                    " notice as a GET without its body): set the notice URL to the address it"
                    " points to",
                    final=True,
                )
            wait = None
            if resp.status in urllib3.Retry.RETRY_AFTER_STATUS_CODES:
                # the shared policy's reading: a Retry-After that is no time is no answer
                wait = retry_policy().get_retry_after(resp)
            if wait is not None and wait > http_retry.RETRY_AFTER_MAX_S:
                # a longer wait is the answer now (docs/development.md), not a sleep of the
                # notice thread for hours while its heartbeat keeps the lease
                raise WebhookAnswer(
                    f"the webhook answered HTTP {resp.status} and asked for a wait of"
                    f" {wait:.0f} s (a notice waits at most {http_retry.RETRY_AFTER_MAX_S:.0f} s)",
                    final=True,
                    retry_after=wait,
                )
            raise WebhookAnswer(f"the webhook answered HTTP {resp.status}", retry_after=wait)


LEASE_S = 60.0  # how long a lease holds without its heartbeat (a sender that died)
RENEW_S = LEASE_S / 4  # the heartbeat: a delivery in flight renews its lease this often
WORKERS = 4  # deliveries at once: one slow webhook answer does not hold up the other notices
_TOKEN = os.urandom(4).hex()


def owner() -> str:
    """Who holds a lease: this host and process (taken at each call, so a forked child is
    not its parent)."""
    return f"{os.uname().nodename}:{os.getpid()}:{_TOKEN}"


class Owed:
    """One notice owed in the job store's outbox: leased before it is sent (one sender at a
    time across processes), its lease renewed while it is being sent, marked sent once the
    webhook acknowledged it, else given back."""

    def __init__(self, store: Any, handle: str) -> None:
        self.store = store
        self.handle = handle

    def lease(self) -> bool:
        return bool(self.store.lease_notice(self.handle, owner(), LEASE_S))

    def renew(self) -> bool:
        return bool(self.store.renew_notice(self.handle, owner(), LEASE_S))

    def sent(self) -> None:
        self.store.notice_sent(self.handle)

    def unsent(self, error: str | None, tries: int) -> None:
        self.store.notice_unsent(self.handle, owner(), error, tries)


Job = tuple[str, Callable[[], dict[str, Any]], "Owed | None"]


class Notifier:
    """Sends notices from daemon threads of its own (up to ``WORKERS`` at once):
    ``submit(url, build, owed)`` returns at once; ``build()`` (which may read logs for the
    failure card) runs on a sender thread too. With ``owed`` (the outbox's record) a notice is
    sent only by the process that leased it, its lease is renewed while it is being sent (so
    no other process sends it again while this one waits for a slow webhook), and it stays
    owed until the webhook acknowledges it. A notice given up on is one line to whoever
    ``listen``s for its job (the cell that submitted it), never a Python warning."""

    def __init__(self, sender: Callable[[str, dict[str, Any]], None] = post) -> None:
        self._send = sender
        self._queue: queue.Queue[Job] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._heartbeat: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._leased: dict[str, Owed] = {}
        self._lost: set[str] = set()  # leases that ran out while held (a stalled process)
        self._inflight: set[str] = set()
        self._listeners: dict[str, list[Callable[[str], None]]] = {}
        self._child: Any = None  # the sender process notices were handed off to
        self.owed: dict[str, Owed] = {}  # every outbox notice this process was given
        self.sent = 0

    def submit(
        self,
        url: str,
        build: Callable[[], dict[str, Any]],
        owed: Owed | None = None,
        hand_off: bool = False,
    ) -> None:
        """Send a notice; with ``hand_off`` (a short-lived command: an outbox notice only) a
        sender process of its own sends it, so it is not abandoned mid-POST when the command
        exits (the webhook would have it, unacknowledged, and get it again from the next
        process once the lease ran out)."""
        if owed is not None:
            self.owed.setdefault(owed.handle, owed)
            if hand_off:
                self._hand_off()
                return
        self._queue.put((url, build, owed))
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            if len(self._threads) < WORKERS:
                thread = threading.Thread(target=self._run, daemon=True, name="torchx-nb-notices")
                self._threads.append(thread)
                thread.start()

    def _hand_off(self) -> None:
        """Start the sender process (``python -m torchx_nb.notice_sender``: it sends every
        owed notice with this process's environment and folder, then exits), unless the one
        started before is still running."""
        import subprocess
        import sys

        with self._lock:
            if self._child is not None and self._child.poll() is None:
                return
            self._child = subprocess.Popen(
                [sys.executable, "-m", "torchx_nb.notice_sender"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not stopped with the command's terminal (Ctrl-C)
            )

    def listen(self, handle: str, callback: Callable[[str], None]) -> None:
        """Call ``callback(line)`` when the notice of ``handle`` is given up on for now (the
        line says why and that it stays owed)."""
        with self._lock:
            self._listeners.setdefault(handle, []).append(callback)

    def drain(self, timeout: float = 30.0) -> None:
        """Wait until every notice queued so far was sent or given up (a CLI about to exit)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)

    def finish(self, timeout: float) -> list[str]:
        """A process about to exit: wait up to ``timeout`` s, give back the notices it leased
        and is not sending right now (a later process sends them; one being POSTed keeps its
        lease until it runs out, since the webhook may yet take it), and return the handles
        whose notice is still owed."""
        deadline = time.monotonic() + timeout
        self.drain(timeout)
        with self._lock:
            waiting = [o for h, o in self._leased.items() if h not in self._inflight]
        for owed in waiting:
            with contextlib.suppress(Exception):
                owed.unsent(None, 0)
        while True:
            still = [h for h, o in self.owed.items() if _owed_still(o)]
            if not still or self._child is None or time.monotonic() >= deadline:
                return still
            time.sleep(0.05)  # the sender process may yet have them acknowledged

    def _run(self) -> None:
        while True:
            url, build, owed = self._queue.get()
            try:
                if owed is None:
                    self._deliver(url, build, None)
                elif owed.lease():
                    self._hold(owed)
                    try:
                        self._deliver(url, build, owed)
                    finally:
                        with self._lock:
                            self._leased.pop(owed.handle, None)
                            self._lost.discard(owed.handle)
            except Exception as e:
                self._warn(url, e)
            finally:
                self._queue.task_done()

    def _hold(self, owed: Owed) -> None:
        """Keep ``owed``'s lease while this process sends it: the heartbeat thread renews it
        every ``RENEW_S``."""
        with self._lock:
            self._leased[owed.handle] = owed
            if self._heartbeat is None or not self._heartbeat.is_alive():
                self._heartbeat = threading.Thread(
                    target=self._beat, daemon=True, name="torchx-nb-notice-leases"
                )
                self._heartbeat.start()

    def _beat(self) -> None:
        while True:
            time.sleep(RENEW_S)
            with self._lock:
                held = list(self._leased.values())
            for owed in held:
                try:
                    kept = owed.renew()
                except Exception:
                    continue  # the store is busy: the lease still has time; try next beat
                if not kept:
                    with self._lock:
                        self._lost.add(owed.handle)

    def _post(self, url: str, body: dict[str, Any], owed: Owed | None) -> None:
        key = owed.handle if owed is not None else None
        with self._lock:
            if key:
                self._inflight.add(key)
        try:
            self._send(url, body)
        finally:
            with self._lock:
                self._inflight.discard(key or "")

    def _deliver(self, url: str, build: Callable[[], dict[str, Any]], owed: Owed | None) -> None:
        try:
            body = build()
        except Exception as e:
            self._give_up(url, e, owed, 0)
            return
        retry = retry_policy()
        tries = 0
        while True:
            if owed is not None and owed.handle in self._lost:
                return  # another process holds it now: it sends it, not this one
            try:
                tries += 1
                self._post(url, body, owed)
                if owed is not None:
                    owed.sent()
                with self._lock:
                    self.sent += 1
                return
            except Exception as e:
                answer = e if isinstance(e, WebhookAnswer) else None
                try:
                    if answer is not None and answer.final:
                        raise
                    retry = retry.increment("POST", url, error=e if answer is None else None)
                except Exception:
                    self._give_up(url, e, owed, tries)
                    return
                after = answer.retry_after if answer is not None else None
                after = min(after or 0.0, http_retry.RETRY_AFTER_MAX_S)
                time.sleep(max(retry.get_backoff_time(), after))

    def _give_up(self, url: str, e: BaseException, owed: Owed | None, tries: int) -> None:
        """The notice was not delivered this time: an outbox notice stays owed with the reason
        (a later process sends it) and its job's listeners get one line; a notice without an
        outbox is one warning per URL."""
        from torchx_nb.errors import DEBUG_ENV, one_line

        if owed is None:
            self._warn(url, e)
            return
        # kept in the store and shown later (status, the cell): a traceback hint there
        # points at a traceback no later command can show
        hint = f" (set {DEBUG_ENV}=1 to see the traceback)"
        reason = redact_text(one_line(e)).removesuffix(hint)
        with contextlib.suppress(Exception):
            owed.unsent(reason, tries)
        tried = f" after {tries} tries" if tries > 1 else ""
        line = (
            f"the job-end notice to {shown_url(url)} is not delivered yet{tried}: {reason};"
            " it stays owed and the next torchx-nb command, kernel or server sends it"
        )
        with self._lock:
            listeners = list(self._listeners.get(owed.handle, ()))
        for callback in listeners:
            with contextlib.suppress(Exception):
                callback(line)

    def _warn(self, url: str, e: BaseException) -> None:
        if url in self._warned:
            return
        self._warned.add(url)
        from torchx_nb.errors import one_line

        warnings.warn(
            f"the job-end notice to {shown_url(url)} failed: {redact_text(one_line(e))}",
            stacklevel=2,
        )


def owed_line(handle: str) -> str:
    """What a command about to exit says of a notice still owed: while a sender holds it,
    that it will be sent when the webhook answers; once a sender gave it back, the webhook's
    last answer (a 302 names the fix: no later try can succeed without it)."""
    record = None
    with contextlib.suppress(Exception):
        owed = notifier().owed.get(handle)
        record = owed.store.notice(handle) if owed is not None else None
    if record and record.get("error") and not (record.get("lease") or 0) > time.time():
        return (
            f"the notice for {handle} is not delivered yet: {record['error']}; it stays owed"
            " and the next torchx-nb command, kernel or server sends it"
        )
    return f"the notice for {handle} will be sent when the webhook answers"


def _owed_still(owed: Owed) -> bool:
    try:
        record = owed.store.notice(owed.handle)
    except Exception:
        return False
    return record is not None and record["sent"] is None


_notifier: Notifier | None = None
_notifier_lock = threading.Lock()


def notifier() -> Notifier:
    """This process's one sender."""
    global _notifier
    with _notifier_lock:
        if _notifier is None:
            _notifier = Notifier()
        return _notifier


def drain(timeout: float = 30.0) -> None:
    """Wait for the notices this process queued, if it queued any."""
    with _notifier_lock:
        current = _notifier
    if current is not None:
        current.drain(timeout)


def finish(timeout: float = 2.0) -> list[str]:
    """A process about to exit: ``Notifier.finish`` of this process's sender, if it has one;
    the handles whose notice is still owed."""
    with _notifier_lock:
        current = _notifier
    return current.finish(timeout) if current is not None else []


__all__ = [
    "MAX_BODY_BYTES",
    "NOTIFY_ENV",
    "Notifier",
    "NotifyError",
    "Owed",
    "WebhookAnswer",
    "drain",
    "finish",
    "notice_id",
    "notifier",
    "notify_url",
    "owed_line",
    "payload",
    "shown_url",
]
