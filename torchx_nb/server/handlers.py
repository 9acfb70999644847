"""The REST API's handlers. Jupyter's own base handler does the security: authentication (token
or cookie) on every request, XSRF on state-changing ones made with a cookie, and refusal of
cross-origin requests. Every query value is checked (a bad one is a 400 naming it) before any
work, and the work runs in the job service's thread pool, never on the event loop.

Server-sent events are written here by hand: the format is four line prefixes, and tornado has
no maintained SSE helper (sse-starlette and friends serve Starlette)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import tornado.iostream
import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin

from torchx_nb.errors import one_line
from torchx_nb.redact import redact_text
from torchx_nb.server.jobs import JOBS_PAGE_MAX, JobService, matches
from torchx_nb.server.parameters import notebook_parameters
from torchx_nb.server.schema import check_param
from torchx_nb.server.submit import parse_submission
from torchx_nb.specs.exceptions import (
    BadParameter,
    BadRequest,
    BadSubmission,
    NoSuchJob,
    ServerFailed,
    TorchxNbError,
    UpstreamError,
    UpstreamUnavailable,
    http_status,
    refuses,
)
from torchx_nb.user_regex import compile_regex

PREFIX = "/torchx-nb/api"
OPENAPI = Path(__file__).with_name("openapi.json")
CHUNK = 1 << 20  # an output file is streamed in pieces this big
_HANDLE = re.compile(r"[a-z0-9_]+://[^/\s]*/\S+")
_SCHEDULER = re.compile(r"[a-z0-9_]{1,64}")
MAX_TEXT = 200


@dataclass(frozen=True)
class Asking:
    """What a handler is asking the job service for (``Base.work``), so that ``write_error``
    can answer for its failure: ``what`` names it, ``failure`` is the table's class for an
    error the table does not list (``UpstreamError``, 502, ``UpstreamUnavailable``, 503,
    ``ServerFailed``, 500); ``refused``, for a check made before anything is built: an error
    that ``exceptions.refuses`` calls the request's fault is a ``BadSubmission`` (400), its
    line after this field's name ("": none)."""

    what: str
    failure: type[TorchxNbError]
    refused: str | None = None


def _status(klass: type[TorchxNbError]) -> int:
    """The table's status for errors of ``klass``."""
    return http_status(klass("")) or 500


class Base(ExtensionHandlerMixin, APIHandler):
    """What every endpoint shares: the job service and checked arguments."""

    asking: Asking | None = None

    def jobs(self) -> JobService:
        return self.extensionapp.jobs  # type: ignore[attr-defined]

    def handle_arg(self, raw: str) -> str:
        handle = unquote(raw)
        if not _HANDLE.fullmatch(handle):
            raise BadRequest("not a job handle")
        return handle

    def documented_arg(self, path: str, name: str) -> str | None:
        """A query value as sent, checked against its schema in openapi.json (an enum's
        values are taken exactly as listed there); None when not sent."""
        value = self.exact_arg(name)
        check_param(f"{PREFIX}{path}", self.request.method.lower(), name, value)
        return value

    def exact_arg(self, name: str) -> str | None:
        """A query parameter exactly as sent: tornado's ``get_argument`` strips it and turns
        control characters into spaces, which would change a regex."""
        values = self.request.query_arguments.get(name)
        if not values:
            return None
        return str(self.decode_argument(values[-1], name=name))

    def text_arg(self, name: str, pattern: re.Pattern[str] | None = None) -> str | None:
        value = self.get_argument(name, None)
        if value is None or value == "":
            return None
        if len(value) > MAX_TEXT or (pattern is not None and not pattern.fullmatch(value)):
            raise BadRequest(f"{name} is not valid")
        return value

    def int_arg(self, name: str, default: int, low: int, high: int) -> int:
        text = self.get_argument(name, str(default))
        if not re.fullmatch(r"-?[0-9]{1,12}", text):
            raise BadRequest(f"{name} must be a number")
        value = int(text)
        if not low <= value <= high:
            raise BadRequest(f"{name} must be in {low}..{high}")
        return value

    def answer(self, exc: BaseException) -> tuple[int, str] | None:
        """The status and one-line reason (masked) ``exc`` is answered with, by the one table
        of ``torchx_nb.specs.exceptions``: a listed error by its class; another, raised while
        the service was asked for something (``asking``), as a refusal of a check (400) or as
        that thing's failure (``{what} unavailable: …``, the status of ``asking.failure``).
        None: not ours to answer."""
        status = http_status(exc)
        if status is not None:
            return status, self.reason(exc)
        asking = self.asking
        if asking is None:
            return None
        if asking.refused is not None and refuses(exc):
            return _status(BadSubmission), self.refusal(exc, asking.refused)[:300]
        return _status(asking.failure), f"{asking.what} unavailable: {self.reason(exc)}"[:300]

    def refusal(self, exc: BaseException, field: str) -> str:
        """A check's refusal, after the field it refuses ("" none)."""
        return f"{field}: {self.reason(exc)}" if field else self.reason(exc)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The one place errors become answers (``answer``): Jupyter's JSON error with the
        one line as the reason; any other of our own errors is a 500 saying so and how to fix
        it, not "Unhandled error"."""
        exc = (kwargs.get("exc_info") or (None, None, None))[1]
        found = self.answer(exc) if exc is not None else None
        if found is not None and found[0] != 500:
            status, reason = found
            self.set_status(status, reason=reason)
            answer = tornado.web.HTTPError(status, reason=reason)
            super().write_error(status, exc_info=(type(answer), answer, None))
            return
        if found is not None or isinstance(exc, TorchxNbError):
            reason = found[1] if found is not None else redact_text(one_line(exc))[:500]  # type: ignore[arg-type]
            self.set_status(500)
            self.set_header("Content-Type", "application/json")
            self.log.warning("torchx_nb: %s", reason)
            self.finish(json.dumps({"message": reason, "reason": reason}))
            return
        super().write_error(status_code, **kwargs)

    def log_exception(self, typ: Any, value: BaseException | None, tb: Any) -> None:
        """An error answered by the table is logged as one line (as tornado logs its
        ``HTTPError``), not an uncaught exception with its traceback."""
        found = self.answer(value) if value is not None else None
        if found is not None:
            self.log.warning("%s: %s", self._request_summary(), found[1])
            return
        super().log_exception(typ, value, tb)

    async def work(
        self,
        what: str,
        failure: type[TorchxNbError],
        fn: Any,
        *args: Any,
        missing: str = "no such job",
        refused: str | None = None,
    ) -> Any:
        """``fn(*args)`` in the job service's pool; what it raises goes through as it is, to be
        answered by ``write_error`` as asking for ``what`` (``Asking``: ``failure`` for an error
        the table does not list, ``refused`` for a check). ``None`` from ``fn``: no such job in
        the store (``missing`` says what)."""
        self.asking = Asking(what, failure, refused)
        body = await self.jobs().run(fn, *args)
        self.asking = None
        if body is None:
            raise NoSuchJob(missing)
        return body

    @staticmethod
    def reason(e: BaseException) -> str:
        return redact_text(one_line(e))[:300]

    def write_json(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


class JobsHandler(Base):
    @tornado.web.authenticated
    async def get(self) -> None:
        page = self.int_arg("page", 1, 1, 1_000_000)
        per_page = self.int_arg("per_page", 50, 1, JOBS_PAGE_MAX)
        state = self.documented_arg("/jobs", "state")
        after = self.exact_arg("after") or None
        service = self.jobs()
        service.feed.touch()
        body = await service.run(
            service.page,
            self.text_arg("scheduler", _SCHEDULER),
            state,
            self.text_arg("notebook"),
            self.text_arg("q"),
            page,
            per_page,
            after,
        )
        self.write_json(body)

    submission: Any = None

    @tornado.web.authenticated
    async def post(self) -> None:
        """Run a notebook as a job (the body: notebook, parameters, scheduler, cfg, image,
        resource, name, cell_timeout): 201 with its row; 400 with the one-line reason, before
        anything is built or submitted, for anything that cannot run (the dry run's refusal);
        a backend, registry or daemon that does not answer is 503 (or 502) with its line, as
        the table says."""
        service = self.jobs()
        self.submission = sub = parse_submission(self.request.body, service.root_dir)
        request = await self.work("scheduler", UpstreamError, service.notebook_request, sub)
        if sub.typed_cfg:
            await self.work(
                "scheduler", UpstreamError, service.check_cfg, request, refused="typed_cfg"
            )
        await self.work("scheduler", UpstreamError, service.check, request, refused="")
        self.write_json(await self.work("scheduler", UpstreamError, service.submit, request), 201)

    def refusal(self, exc: BaseException, field: str) -> str:
        """A parameter is named by the body's field, not the CLI's flag."""
        if isinstance(exc, BadParameter) and self.submission is not None:
            field = "typed_parameters" if exc.name in self.submission.typed else "parameters"
            return f"{field}.{exc.name}: {exc.why}"
        return super().refusal(exc, field)


class SchedulersHandler(Base):
    @tornado.web.authenticated
    async def get(self) -> None:
        service = self.jobs()
        self.write_json(await self.work("schedulers", UpstreamUnavailable, service.schedulers))


class ParametersHandler(Base):
    """A notebook's parameters cell, names and values as written: what the Run as Job dialog
    pre-fills (it sends back only the values the user changed)."""

    @tornado.web.authenticated
    async def get(self) -> None:
        notebook = self.documented_arg("/parameters", "notebook")
        if notebook is None:
            raise BadRequest("notebook: give the path of a .ipynb file")
        service = self.jobs()
        body = await self.work(
            "parameters", ServerFailed, notebook_parameters, notebook, service.root_dir
        )
        self.write_json(body)


class ExecutedNotebookHandler(Base):
    """A notebook job's executed notebook, fetched into the server's folder beside the
    notebook it ran, never overwriting a file: 201 with its path, to open."""

    @tornado.web.authenticated
    async def post(self, raw: str) -> None:
        handle = self.handle_arg(raw)
        service = self.jobs()
        self.write_json(
            await self.work("outputs", UpstreamError, service.fetch_notebook, handle), 201
        )


class OneJob(Base):
    """``GET`` of what the job service reads of one job (``read``), as JSON; ``what`` names
    it in an answer that it is unavailable."""

    what = "job"
    read: Any = staticmethod(JobService.detail)

    @tornado.web.authenticated
    async def get(self, raw: str) -> None:
        handle = self.handle_arg(raw)
        self.write_json(await self.work(self.what, UpstreamError, self.read, self.jobs(), handle))


class JobHandler(OneJob):
    """The job's row, its replicas and its failure cards."""


class LogsHandler(Base):
    @tornado.web.authenticated
    async def get(self, raw: str) -> None:
        handle = self.handle_arg(raw)
        stream = self.get_argument("stream", "combined")
        if stream not in ("combined", "stdout", "stderr"):
            raise BadRequest("stream is combined, stdout or stderr")
        regex = self.exact_arg("regex")
        if regex is not None:
            compile_regex(regex)
        args = (
            handle,
            self.text_arg("role"),
            self.int_arg("replica", 0, 0, 100_000),
            stream,
            regex or None,
            self.int_arg("tail", 0, 0, 100_000),
            self.int_arg("start", 0, 0, 10_000_000),
            self.int_arg("end", 0, 0, 10_000_000),
        )
        service = self.jobs()
        self.write_json(await self.work("logs", UpstreamError, service.logs, *args))


class ResultHandler(OneJob):
    """The short repr of a cell job's value, as the job wrote it (never unpickled here)."""

    what = "outputs"
    read = staticmethod(JobService.result)


class OutputsHandler(OneJob):
    """The files the job wrote to ``$TORCHX_OUTPUT_DIR``."""

    what = "outputs"
    read = staticmethod(JobService.outputs)


class OutputFileHandler(Base):
    """One output file, streamed in chunks read in the service's pool (never held whole)."""

    @tornado.web.authenticated
    async def get(self, raw: str, path: str) -> None:
        handle = self.handle_arg(raw)
        name = path  # tornado has decoded it once, as the page encoded it once
        if not name or len(name) > 4096 or "\0" in name:
            raise BadRequest("not an output path")
        service = self.jobs()
        stream, size = await self.work(
            "outputs",
            UpstreamError,
            service.open_output,
            handle,
            name,
            missing="no such job or output file",
        )
        base = name.rsplit("/", 1)[-1]
        self.set_header("Content-Type", "application/octet-stream")
        self.set_header("Content-Length", str(size))
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header(
            "Content-Disposition", f"attachment; filename*=UTF-8''{quote(base, safe='')}"
        )
        try:
            while chunk := await service.run(stream.read, CHUNK):
                self.write(chunk)
                await self.flush()
        except tornado.iostream.StreamClosedError:
            return
        finally:
            await service.run(stream.close)
        self.finish()


class CancelHandler(Base):
    """202 once the scheduler was asked to stop the job; 404 for a job not in the store or no
    longer known to its scheduler, 409 for one that has already ended, 503 when its scheduler
    cannot be reached or used here (not installed, unreachable, unknown)."""

    @tornado.web.authenticated
    async def post(self, raw: str) -> None:
        handle = self.handle_arg(raw)
        service = self.jobs()
        found = await self.work("scheduler", UpstreamUnavailable, service.cancel, handle)
        if not found:
            raise NoSuchJob("no such job")
        self.write_json({"handle": handle, "cancel": "requested"}, status=202)


class PreemptHandler(Base):
    """202 once the job is being preempted as its backend would (``torchx-nb preempt``); 404
    for a job not in the store or no longer known to its scheduler, 409 for one that is not
    running or whose backend cannot preempt on request (the one line says which), 503 when its
    scheduler cannot be reached or used here."""

    @tornado.web.authenticated
    async def post(self, raw: str) -> None:
        handle = self.handle_arg(raw)
        runner = self.jobs().runner

        def preempt() -> bool | None:
            if runner.jobstore.get(handle) is None:
                return None
            runner.preempt(handle)
            return True

        await self.work("scheduler", UpstreamUnavailable, preempt)
        self.write_json({"handle": handle, "preempt": "requested"}, status=202)


class EventsHandler(Base):
    """Server-sent events: a ``job`` event with a job's row whenever its state changes and a
    ``counts`` event with the jobs per state, each batch with an id to resume from
    (``Last-Event-ID`` or ``?last_event_id=``). Without an id, or with a well-formed one it cannot
    resume from (another server's, before a restart, before a store swap), the stream starts with a ``reset`` event (reload the list with
    ``GET /jobs``) and the jobs not yet ended. With a jobs page's filters (``scheduler``,
    ``state``, ``q``), each job row also says whether it ``match``es them, by the store's own
    rules, so a filtered list stays what a reload would show."""

    _closed = False
    _counted = False
    _filtered = False
    _filters: tuple[str | None, str | None, str | None] = (None, None, None)

    def on_connection_close(self) -> None:
        """The client left: stop counting it at once (the poller stops after the last)."""
        self._closed = True
        self._leave()

    def _leave(self) -> None:
        if self._counted:
            self._counted = False
            self.jobs().feed.disconnect()

    @tornado.web.authenticated
    async def get(self) -> None:
        service = self.jobs()
        version = service.feed.resume_from(
            self.request.headers.get("Last-Event-ID") or self.get_argument("last_event_id", "")
        )
        once = self.documented_arg("/events", "once") == "1"
        state = self.documented_arg("/events", "state")
        self._filters = (self.text_arg("scheduler", _SCHEDULER), state, self.text_arg("q"))
        self._filtered = any(self._filters)
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        service.feed.connect()
        self._counted = True
        try:
            reset = version < 0
            if not reset:
                await self.flush()  # the headers at once: the client knows it is connected
            while not self._closed:
                if reset:
                    version = service.feed.version
                    rows = await service.run(service.feed.active_rows)
                    self.write("event: reset\ndata: {}\n\n")
                    counts = True
                else:
                    version, found = await service.feed.changes(version)
                    if self._closed:
                        return
                    if found is None:  # the store was swapped: reload, as a new client
                        reset = True
                        continue
                    rows, counts = found, bool(found) or once
                reset = False
                await self._send(service, version, rows, counts=counts)
                if once:
                    return
        except tornado.iostream.StreamClosedError:
            return
        finally:
            self._leave()
            if not self._closed:
                self.finish()

    async def _send(
        self, service: JobService, version: int, rows: list[dict[str, Any]], counts: bool
    ) -> None:
        for row in rows:
            if self._filtered:
                row = {**row, "match": matches(row, *self._filters)}
            self.write(f"event: job\ndata: {json.dumps(row)}\n\n")
        if counts:
            self.write(f"event: counts\ndata: {json.dumps(await service.run(service.counts))}\n\n")
        self.write(f"id: {service.feed.event_id(version)}\n: version {version}\n\n")
        await self.flush()


class OpenApiHandler(Base):
    @tornado.web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(OPENAPI.read_text())


# a handle (sent encoded, or with its slashes) never holds "/outputs/": that is where an
# output file's name begins, so /jobs/H/outputs/logs is the file "logs", not H/outputs's logs
_JOB = r"/jobs/(?P<raw>(?:(?!/outputs/)[^?])+?)"
ROUTES: list[tuple[str, type[Base]]] = [
    (rf"{PREFIX}/jobs", JobsHandler),
    (rf"{PREFIX}{_JOB}/logs", LogsHandler),
    (rf"{PREFIX}{_JOB}/cancel", CancelHandler),
    (rf"{PREFIX}{_JOB}/preempt", PreemptHandler),
    (rf"{PREFIX}{_JOB}/result", ResultHandler),
    (rf"{PREFIX}{_JOB}/outputs", OutputsHandler),
    # a file in a subfolder as the listing names it (sub/x.txt), its slashes sent or encoded;
    # only a path in the listing is served (never one outside the output folder)
    (rf"{PREFIX}{_JOB}/outputs/(?P<path>[^?]+)", OutputFileHandler),
    (rf"{PREFIX}{_JOB}/notebook", ExecutedNotebookHandler),
    (rf"{PREFIX}{_JOB}", JobHandler),
    (rf"{PREFIX}/events", EventsHandler),
    (rf"{PREFIX}/schedulers", SchedulersHandler),
    (rf"{PREFIX}/parameters", ParametersHandler),
    (rf"{PREFIX}/openapi\.json", OpenApiHandler),
]
