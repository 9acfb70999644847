"""The REST API's handlers. Jupyter's own base handler does the security: authentication (token
or cookie) on every request, XSRF on state-changing ones made with a cookie, and refusal of
cross-origin requests. Scheduler calls run in a thread so the server never blocks on them."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from torchx_nb.runner import NoSuchReplica
from torchx_nb.server.jobs import JOBS_PAGE_MAX, JobService, one_line
from torchx_nb.specs.api import UnknownAppException

PREFIX = "/torchx-nb/api"
OPENAPI = Path(__file__).with_name("openapi.json")


def _handler_base() -> Any:
    from jupyter_server.base.handlers import APIHandler

    return APIHandler


def setup_handlers(web_app: Any) -> None:
    import tornado.web

    APIHandler = _handler_base()
    base_url = web_app.settings.get("base_url", "/")
    service = JobService(root_dir=web_app.settings.get("server_root_dir"))
    web_app.settings["torchx_nb_jobs"] = service

    class Base(APIHandler):  # type: ignore[misc,valid-type]
        def jobs(self) -> JobService:
            return service

        def handle_arg(self, raw: str) -> str:
            handle = unquote(raw)
            if not re.match(r"^[a-z0-9_]+://[^/\s]*/\S+$", handle):
                raise tornado.web.HTTPError(400, reason="not a job handle")
            return handle

        def exact_arg(self, name: str) -> str | None:
            """A query parameter exactly as sent: tornado's ``get_argument`` strips it and turns
            control characters into spaces, which would change a regex."""
            values = self.request.query_arguments.get(name)
            if not values:
                return None
            return str(self.decode_argument(values[-1], name=name))

        def int_arg(self, name: str, default: int, low: int, high: int) -> int:
            text = self.get_argument(name, str(default))
            try:
                value = int(text)
            except ValueError:
                raise tornado.web.HTTPError(400, reason=f"{name} must be a number") from None
            if not low <= value <= high:
                raise tornado.web.HTTPError(400, reason=f"{name} must be in {low}..{high}")
            return value

        def write_json(self, body: Any, status: int = 200) -> None:
            self.set_status(status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(body))

    class JobsHandler(Base):
        @tornado.web.authenticated
        async def get(self) -> None:
            page = self.int_arg("page", 1, 1, 1_000_000)
            per_page = self.int_arg("per_page", 50, 1, JOBS_PAGE_MAX)
            body = self.jobs().page(
                scheduler=self.get_argument("scheduler", None),
                state=self.get_argument("state", None),
                notebook=self.get_argument("notebook", None),
                text=self.get_argument("q", None),
                page=page,
                per_page=per_page,
            )
            self.write_json(body)

    class JobHandler(Base):
        @tornado.web.authenticated
        async def get(self, raw: str) -> None:
            handle = self.handle_arg(raw)
            body = await asyncio.get_running_loop().run_in_executor(
                None, self.jobs().detail, handle
            )
            if body is None:
                raise tornado.web.HTTPError(404, reason="no such job")
            self.write_json(body)

    class LogsHandler(Base):
        @tornado.web.authenticated
        async def get(self, raw: str) -> None:
            handle = self.handle_arg(raw)
            stream = self.get_argument("stream", "combined")
            if stream not in ("combined", "stdout", "stderr"):
                raise tornado.web.HTTPError(400, reason="stream is combined, stdout or stderr")
            regex = self.exact_arg("regex")
            if regex is not None:
                try:
                    re.compile(regex)
                except re.error as e:
                    raise tornado.web.HTTPError(400, reason=f"bad regex: {e}") from None
            args = {
                "role": self.get_argument("role", None),
                "replica": self.int_arg("replica", 0, 0, 100_000),
                "stream": stream,
                "regex": regex,
                "tail": self.int_arg("tail", 0, 0, 100_000),
                "start": self.int_arg("start", 0, 0, 10_000_000),
                "end": self.int_arg("end", 0, 0, 10_000_000),
            }
            try:
                body = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: self.jobs().logs(handle, **args)
                )
            except (UnknownAppException, NoSuchReplica) as e:
                raise tornado.web.HTTPError(404, reason=one_line(e)) from None
            except Exception as e:
                raise tornado.web.HTTPError(
                    502, reason=f"logs unavailable: {one_line(e)}"
                ) from None
            if body is None:
                raise tornado.web.HTTPError(404, reason="no such job")
            self.write_json(body)

    class CancelHandler(Base):
        @tornado.web.authenticated
        async def post(self, raw: str) -> None:
            handle = self.handle_arg(raw)
            found = await asyncio.get_running_loop().run_in_executor(
                None, self.jobs().cancel, handle
            )
            if not found:
                raise tornado.web.HTTPError(404, reason="no such job")
            self.write_json({"handle": handle, "cancel": "requested"}, status=202)

    class EventsHandler(Base):
        """Server-sent events: a ``job`` event with a job's row whenever its state changes and a
        ``counts`` event with the jobs per state, each batch with an id to resume from
        (``Last-Event-ID`` or ``?last_event_id=``); without one, every job comes first."""

        @tornado.web.authenticated
        async def get(self) -> None:
            self.set_header("Content-Type", "text/event-stream")
            self.set_header("Cache-Control", "no-cache")
            self.set_header("X-Accel-Buffering", "no")
            service = self.jobs()
            version = service.resume_from(
                self.request.headers.get("Last-Event-ID")
                or self.get_argument("last_event_id", None)
            )
            once = self.get_argument("once", "0") == "1"
            loop = asyncio.get_running_loop()
            while True:
                version, rows = await service.changes(version)
                for row in rows:
                    self.write(f"event: job\ndata: {json.dumps(row)}\n\n")
                if rows or once:
                    counts = await loop.run_in_executor(None, service.counts)
                    self.write(f"event: counts\ndata: {json.dumps(counts)}\n\n")
                self.write(f"id: {service.event_id(version)}\n: version {version}\n\n")
                try:
                    await self.flush()
                except Exception:
                    return
                if once:
                    self.finish()
                    return

    class OpenApiHandler(Base):
        @tornado.web.authenticated
        def get(self) -> None:
            self.set_header("Content-Type", "application/json")
            self.finish(OPENAPI.read_text())

    job = r"/jobs/(?P<raw>[^?]+?)"
    routes = [
        (rf"{PREFIX}/jobs", JobsHandler),
        (rf"{PREFIX}{job}/logs", LogsHandler),
        (rf"{PREFIX}{job}/cancel", CancelHandler),
        (rf"{PREFIX}{job}", JobHandler),
        (rf"{PREFIX}/events", EventsHandler),
        (rf"{PREFIX}/openapi\.json", OpenApiHandler),
    ]
    from jupyter_server.utils import url_path_join

    web_app.add_handlers(
        ".*$", [(url_path_join(base_url, path), handler) for path, handler in routes]
    )
