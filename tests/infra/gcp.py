"""A stateful GCP Batch + Cloud Logging on 127.0.0.1, for the real google-cloud-batch and
google-cloud-logging clients (REST transport) and google-auth.

- **Auth:** a service-account key is generated per server. Its ``token_uri`` is this server's
  ``/token``, which issues access tokens for a JWT signed by that key (what google-auth does for
  a registry login). Every API call needs ``Authorization: Bearer`` with an issued token or a
  self-signed JWT of that key (what the GAPIC clients send). Anything else gets 401.
- **Batch v1:** create, get, list (``locations/-`` too, pages of 100, the AIP-160 subset our
  filters use), delete and cancel (long-running operations returned done), list tasks and
  locations. Requests and responses are the library's own message types (``Job.from_json``
  with unknown fields refused).
- **Running jobs:** each task's container runnable runs in our dockerd with host networking and
  the ``BATCH_*`` variables (task index and count, hosts file, main node hostname). States go
  QUEUED → SCHEDULED → RUNNING → SUCCEEDED/FAILED from the containers' exit codes, with
  ``maxRetryCount`` retries per task, at most ``parallelism`` tasks at once. Unlike GCP's VMs,
  all tasks share this machine's network and pid namespace (``BATCH_MAIN_NODE_HOSTNAME`` is
  127.0.0.1). As on GCP, a task that fails for good leaves the others running; the job is
  FAILED once every task has ended and one of them failed. Script runnables are recorded but not run: they configure a VM, and here
  there is none. ``maxRunDuration`` is not enforced.
- **Logging v2:** ``entries:list`` over ``batch_task_logs`` entries written from the
  containers' stdout (INFO) and stderr (ERROR), labelled ``job_uid`` and ``task_id`` as Batch
  labels them.
- **Faults:** ``fail_next(n, status)`` answers the next ``n`` API calls with an error;
  ``denied_projects`` get PERMISSION_DENIED; ``strict_filters`` refuses every list filter.
- **Without Docker** (benchmarks): tasks of ``idle_projects`` run until cancelled, those of
  ``timed_projects`` for the given seconds, then succeed; neither starts a container.
- **Spot:** ``preempt_task(job, index)`` ends a running task with exit 50001 (its Spot VM
  preempted), ``fail_task(job, index, code)`` with its program's failure (a task of
  ``timed_projects``); each is retried as the task's ``lifecyclePolicies`` say, within its
  ``maxRetryCount`` (``retried``)."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shlex
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

LOCATIONS = ("us-central1", "us-east1", "europe-west4", "asia-southeast1")
HOSTS_FILE = "/etc/cloudbatch-taskgroup-hosts"
# A universe of our own: in Google's, google-auth looks up the service account's "regional access
# boundary" at iamcredentials.googleapis.com in the background, which would leave this machine.
UNIVERSE = "torchx-nb.test"
JOB_PAGE = 100
ENTRY_PAGE = 1000
SEVERITY = {"DEFAULT": 0, "DEBUG": 100, "INFO": 200, "NOTICE": 300, "WARNING": 400, "ERROR": 500}
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


class ApiError(Exception):
    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def to_json(message: Any) -> bytes:
    """A proto-plus message as the real API writes it: camelCase, default values left out (an
    empty ``nextPageToken`` would read as one more page)."""
    from google.protobuf import json_format

    return json_format.MessageToJson(type(message).pb(message)).encode()


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def service_account_key(token_uri: str, project: str) -> tuple[dict[str, str], str]:
    """A fresh service-account key file's content and its public key (PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    info = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": secrets.token_hex(8),
        "private_key": private,
        "client_email": f"torchx-test@{project}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
        "universe_domain": UNIVERSE,
    }
    return info, public


# --- the AIP-160 subset our list filters use ------------------------------------------------


def _split_top(text: str, word: str) -> list[str]:
    parts, depth, start, i = [], 0, 0, 0
    sep = f" {word} "
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1)
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


_TERM = re.compile(r'^([A-Za-z_.]+)\s*(<=|>=|!=|=|<|>|:)\s*("(?:[^"\\]|\\.)*"|\*|[A-Za-z0-9_.-]+)$')


def matches(filter_: str, lookup: Callable[[str], Any]) -> bool:
    """Whether the resource ``lookup`` reads fields of matches ``filter_`` (AND, OR,
    parentheses, ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` and ``key:*``). Raises ApiError on
    anything else, as the real API refuses filters it cannot parse."""
    text = filter_.strip()
    if not text:
        return True
    ands = _split_top(text, "AND")
    if len(ands) > 1:
        return all(matches(a, lookup) for a in ands)
    ors = _split_top(text, "OR")
    if len(ors) > 1:
        return any(matches(o, lookup) for o in ors)
    if text.startswith("(") and text.endswith(")"):
        return matches(text[1:-1], lookup)
    m = _TERM.match(text)
    if m is None:
        raise ApiError(400, "INVALID_ARGUMENT", f"Invalid filter: {filter_!r}")
    field, op, raw = m.groups()
    value = json.loads(raw) if raw.startswith('"') else raw
    have = lookup(field)
    if op == ":":
        return have is not None if value == "*" else value in str(have or "")
    if have is None:
        return op == "!="
    if field == "severity":
        have, value = SEVERITY.get(str(have), 0), SEVERITY.get(str(value), 0)
    elif field == "timestamp":
        have, value = _parse_time(str(have)), _parse_time(str(value))
    return {
        "=": have == value,
        "!=": have != value,
        "<": have < value,
        "<=": have <= value,
        ">": have > value,
        ">=": have >= value,
    }[op]


# --- jobs -----------------------------------------------------------------------------------


class FakeTask:
    def __init__(self, index: int) -> None:
        self.index = index
        self.state = "PENDING"
        self.events: list[dict[str, Any]] = []
        self.attempt = 0
        self.container: Any = None
        self.pumps: list[threading.Thread] = []
        self.exit_code: int | None = None
        self.started = 0.0
        self.preempt = False  # preempt_task: its Spot VM is taken at the next round
        self.fail_code: int | None = None  # fail_task: its program fails at the next round


class FakeJob:
    def __init__(self, job: Any, name: str) -> None:
        self.job = job
        self.name = name
        self.project, self.location = name.split("/")[1], name.split("/")[3]
        self.uid = f"{name.rsplit('/', 1)[-1][:40]}-{uuid.uuid4().hex[:8]}"
        self.state = "QUEUED"
        self.events: list[dict[str, Any]] = []
        self.created = _now()
        self.updated = self.created
        group = job.task_groups[0]
        self.tasks = [FakeTask(i) for i in range(int(group.task_count or 1))]
        self.cancel = False
        self.delete = False
        self.deleted_at: float | None = None


class GcpFake:
    """The server; ``start()`` it with a docker client, ``stop()`` it when done."""

    def __init__(self, root: Path, docker: Any, project: str = "torchx-test") -> None:
        self.root = root
        self.docker = docker
        self.project = project
        self.jobs: dict[str, FakeJob] = {}
        self.entries: list[dict[str, Any]] = []
        self.tokens: set[str] = set()
        self.requests: Counter[str] = Counter()
        self.denied_projects: set[str] = set()
        self.strict_filters = False
        self.faults: list[tuple[int, str, bool]] = []
        self.idle_projects: set[str] = set()
        # project -> seconds: its tasks run that long without a container, then succeed
        self.timed_projects: dict[str, float] = {}
        # jobs of these projects stay SCHEDULED, held by quota, with GCP's own status event
        self.quota_projects: set[str] = set()
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.server: ThreadingHTTPServer | None = None
        self.controller: threading.Thread | None = None
        self.registry_auth: dict[str, str] | None = None
        self.key_info: dict[str, str] = {}
        self.public_key = ""

    # -- lifecycle

    def start(self) -> GcpFake:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                fake._serve(self)

            do_GET = do_POST = do_DELETE = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.key_info, self.public_key = service_account_key(f"{self.url}/token", self.project)
        self.key_file = self.root / "service-account.json"
        self.key_file.write_text(json.dumps(self.key_info))
        self.key_file.chmod(0o600)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.controller = threading.Thread(target=self._control, daemon=True)
        self.controller.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What points the real clients (and a kernel or the CLI) at this server."""
        return {
            "GOOGLE_APPLICATION_CREDENTIALS": str(self.key_file),
            "TORCHX_NB_GCP_BATCH_ENDPOINT": self.url,
            "TORCHX_NB_GCP_LOGGING_ENDPOINT": self.url,
            "GOOGLE_CLOUD_PROJECT": self.project,
            "GOOGLE_CLOUD_UNIVERSE_DOMAIN": UNIVERSE,
            # google-auth must never look for a GCE metadata server off this machine
            "GCE_METADATA_HOST": f"127.0.0.1:{self.port}",
            "GCE_METADATA_IP": f"127.0.0.1:{self.port}",
        }

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            for job in self.jobs.values():
                for task in job.tasks:
                    self._kill(task)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def preempt_task(self, job_name: str, index: int = 0) -> None:
        """End task ``index`` of a running job as GCP Batch ends a task whose Spot VM was
        preempted (exit 50001); it is retried as the task's lifecycle policies say, within its
        maxRetryCount."""
        with self.lock:
            task = self._job(job_name).tasks[index]
            if task.state != "RUNNING":
                raise ValueError(f"task {index} of {job_name} is {task.state}, not RUNNING")
            task.preempt = True

    def fail_task(self, job_name: str, index: int = 0, code: int = 1) -> None:
        """End task ``index`` of a running job as its program failing with exit ``code`` (a
        task of ``timed_projects``, which runs no container); it is retried as the task's
        lifecycle policies say, within its maxRetryCount."""
        with self.lock:
            task = self._job(job_name).tasks[index]
            if task.state != "RUNNING":
                raise ValueError(f"task {index} of {job_name} is {task.state}, not RUNNING")
            task.fail_code = code

    @staticmethod
    def retried(spec: Any, code: int, attempt: int) -> bool:
        """GCP Batch's retry decision: a policy naming ``code`` decides; a code no policy names
        takes the opposite action of the policies (this emulation gives a job policies of
        one kind, the only case the docs settle); with none, every failure is retried; and
        never past maxRetryCount."""
        if attempt >= int(spec.max_retry_count or 0):
            return False
        policies = list(spec.lifecycle_policies)
        for policy in policies:
            if code in list(policy.action_condition.exit_codes):
                return policy.action.name == "RETRY_TASK"
        if not policies:
            return True
        return policies[0].action.name != "RETRY_TASK"

    def fail_next(self, n: int, status: int = 503, after: bool = False) -> None:
        """Answer the next ``n`` API calls with ``status``; with ``after`` each call is carried
        out first (a reply lost on the way back)."""
        names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
        with self.lock:
            self.faults.extend([(status, names.get(status, "UNAVAILABLE"), after)] * n)

    def issue_token(self) -> str:
        token = "ya29.fake-" + secrets.token_urlsafe(24)
        self.tokens.add(token)
        return token

    # -- HTTP

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            if url.path == "/token":
                code, out = 200, self._token(body)
            elif url.path.startswith("/computeMetadata"):
                raise ApiError(404, "NOT_FOUND", "no metadata server here")
            else:
                self._authenticate(h.headers.get("Authorization", ""))
                with self.lock:
                    fault = self.faults.pop(0) if self.faults else None
                unavailable = "The service is currently unavailable."
                if fault and not fault[2]:
                    raise ApiError(fault[0], fault[1], unavailable)
                self.requests[f"{h.command} {self._kind(url.path)}"] += 1
                code, out = 200, self._route(h.command, url.path, query, body)
                if fault:
                    raise ApiError(fault[0], fault[1], unavailable)
        except ApiError as e:
            code = e.code
            out = json.dumps(
                {"error": {"code": e.code, "message": e.message, "status": e.status}}
            ).encode()
        except Exception as e:  # a bug here must reach the test as an answer, not a hang
            import traceback

            traceback.print_exc()
            code = 500
            out = json.dumps(
                {"error": {"code": 500, "message": f"fake: {e!r}", "status": "INTERNAL"}}
            ).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(out)))
        h.end_headers()
        h.wfile.write(out)

    @staticmethod
    def _kind(path: str) -> str:
        if path.endswith("/tasks"):
            return "tasks"
        if "/tasks/" in path:
            return "task"
        if path.endswith(":cancel"):
            return "cancel"
        if path.endswith("/jobs"):
            return "jobs"
        if "/jobs/" in path:
            return "job"
        return path.rsplit("/", 1)[-1]

    def _token(self, body: bytes) -> bytes:
        import google.auth.jwt

        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        try:
            google.auth.jwt.decode(form.get("assertion", ""), certs=self.public_key, verify=True)
        except Exception as e:
            raise ApiError(400, "invalid_grant", f"Invalid JWT Signature: {e}") from None
        body_out = {
            "access_token": self.issue_token(),
            "expires_in": 3600,
            "token_type": "Bearer",
        }
        return json.dumps(body_out).encode()

    def valid_token(self, token: str) -> bool:
        """An access token this server issued, or a JWT signed by its service account's key."""
        import google.auth.jwt

        if token in self.tokens:
            return True
        try:
            google.auth.jwt.decode(token, certs=self.public_key, verify=True)
        except Exception:
            return False
        return True

    def _authenticate(self, header: str) -> None:
        if not self.valid_token(header[7:] if header.startswith("Bearer ") else ""):
            raise ApiError(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            ) from None

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> bytes:
        if path == "/v2/entries:list" and method == "POST":
            return self._list_entries(body)
        m = re.match(r"^/v1/projects/([^/]+)(/.*)?$", path)
        if m is None:
            raise ApiError(404, "NOT_FOUND", f"no route {method} {path}")
        project, rest = m.group(1), m.group(2) or ""
        if project in self.denied_projects:
            raise ApiError(
                403,
                "PERMISSION_DENIED",
                f"Permission 'batch.jobs.{'create' if method == 'POST' else 'get'}' denied on"
                f" 'projects/{project}'",
            )
        if rest == "/locations" and method == "GET":
            return self._locations(project)
        m = re.match(
            r"^/locations/([^/]+)/jobs(?:/([^/:]+))?(:cancel|/taskGroups/([^/]+)/tasks(?:/(\d+))?)?$",
            rest,
        )
        if m is None:
            raise ApiError(404, "NOT_FOUND", f"no route {method} {path}")
        location, job_id, tail = m.group(1), m.group(2), m.group(3)
        if location != "-" and location not in LOCATIONS:
            raise ApiError(
                400,
                "INVALID_ARGUMENT",
                f"Location '{location}' is not supported by Batch for project {project}.",
            )
        parent = f"projects/{project}/locations/{location}"
        if job_id is None and method == "POST":
            return self._create(parent, query.get("jobId", ""), body)
        if job_id is None and method == "GET":
            return self._list_jobs(parent, query)
        name = f"{parent}/jobs/{job_id}"
        if tail == ":cancel" and method == "POST":
            return self._cancel(name)
        if tail and tail.startswith("/taskGroups") and method == "GET":
            return self._list_tasks(name, m.group(5))
        if tail is None and method == "GET":
            return self._job_json(self._job(name))
        if tail is None and method == "DELETE":
            return self._delete(name)
        raise ApiError(404, "NOT_FOUND", f"no route {method} {path}")

    def _locations(self, project: str) -> bytes:
        locs = [
            {"name": f"projects/{project}/locations/{loc}", "locationId": loc} for loc in LOCATIONS
        ]
        return json.dumps({"locations": locs}).encode()

    def _job(self, name: str) -> FakeJob:
        with self.lock:
            job = self.jobs.get(name)
        if job is None or job.deleted_at is not None:
            raise ApiError(404, "NOT_FOUND", f"Job {name} not found.")
        return job

    def _create(self, parent: str, job_id: str, body: bytes) -> bytes:
        from google.cloud import batch_v1

        if not re.match(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", job_id):
            raise ApiError(400, "INVALID_ARGUMENT", f"job_id {job_id!r} is invalid")
        try:
            job = batch_v1.Job.from_json(body.decode(), ignore_unknown_fields=False)
        except Exception as e:
            raise ApiError(400, "INVALID_ARGUMENT", f"Invalid JSON payload: {e}") from None
        if len(job.task_groups) != 1:
            raise ApiError(400, "INVALID_ARGUMENT", "Exactly one task group is supported.")
        name = f"{parent}/jobs/{job_id}"
        with self.lock:
            if name in self.jobs:
                raise ApiError(409, "ALREADY_EXISTS", f"Job {name} already exists.")
            fake = FakeJob(job, name)  # QUEUED, with no event yet (as GCP Batch)
            self.jobs[name] = fake
        return self._job_json(fake)

    def _list_jobs(self, parent: str, query: dict[str, str]) -> bytes:
        from google.cloud import batch_v1

        filter_ = query.get("filter", "")
        if filter_ and self.strict_filters:
            raise ApiError(400, "INVALID_ARGUMENT", f"Invalid filter: {filter_!r}")
        size = min(int(query.get("pageSize") or JOB_PAGE), JOB_PAGE)
        start = int(query.get("pageToken") or 0)
        project, location = parent.split("/")[1], parent.split("/")[3]
        with self.lock:
            jobs = [
                j
                for j in self.jobs.values()
                if j.project == project
                and (location == "-" or j.location == location)
                and j.deleted_at is None
            ]
        selected = [j for j in jobs if matches(filter_, lambda f, j=j: self._field(j, f))]
        page = selected[start : start + size]
        nxt = str(start + size) if start + size < len(selected) else ""
        resp = batch_v1.ListJobsResponse(jobs=[self._message(j) for j in page], next_page_token=nxt)
        return to_json(resp)

    @staticmethod
    def _field(job: FakeJob, field: str) -> Any:
        if field.startswith("labels."):
            return job.job.labels.get(field[7:])
        if field == "status.state":
            return job.state
        if field == "name":
            return job.name
        raise ApiError(400, "INVALID_ARGUMENT", f"Unsupported filter field {field!r}")

    def _list_tasks(self, name: str, one: str | None = None) -> bytes:
        """The job's tasks (all in one page), or task ``one`` alone (get)."""
        from google.cloud import batch_v1

        job = self._job(name)
        if one is not None and int(one) >= len(job.tasks):
            raise ApiError(404, "NOT_FOUND", f"Task {one} of {name} not found")
        with self.lock:
            tasks = [
                batch_v1.Task(
                    name=f"{name}/taskGroups/group0/tasks/{t.index}",
                    status=batch_v1.TaskStatus(
                        state=batch_v1.TaskStatus.State[t.state],
                        status_events=[self._task_event_msg(e) for e in t.events],
                    ),
                )
                for t in job.tasks
                if one is None or t.index == int(one)
            ]
        if one is not None:
            return to_json(tasks[0])
        return to_json(batch_v1.ListTasksResponse(tasks=tasks))

    def _operation(self, name: str) -> bytes:
        op = f"{name.rsplit('/jobs/', 1)[0]}/operations/op-{uuid.uuid4().hex[:12]}"
        return json.dumps({"name": op, "done": True}).encode()

    def _cancel(self, name: str) -> bytes:
        job = self._job(name)
        with self.lock:
            if job.state not in TERMINAL:
                job.cancel = True
        return self._operation(name)

    def _delete(self, name: str) -> bytes:
        job = self._job(name)
        with self.lock:
            job.delete = True
        return self._operation(name)

    # -- messages

    def _message(self, job: FakeJob) -> Any:
        from google.cloud import batch_v1

        with self.lock:
            msg = batch_v1.Job.deserialize(batch_v1.Job.serialize(job.job))
            msg.name = job.name
            msg.uid = job.uid
            msg.create_time = job.created
            msg.update_time = job.updated
            msg.task_groups[0].name = f"{job.name}/taskGroups/group0"
            counts = Counter(t.state for t in job.tasks)
            msg.status = batch_v1.JobStatus(
                state=batch_v1.JobStatus.State[job.state],
                status_events=[
                    batch_v1.StatusEvent(
                        type_="STATUS_CHANGED",
                        description=e["description"],
                        event_time=e["time"],
                    )
                    for e in job.events
                ],
                task_groups={
                    "group0": batch_v1.JobStatus.TaskGroupStatus(
                        counts={k: v for k, v in counts.items() if v}
                    )
                },
            )
        return msg

    def _job_json(self, job: FakeJob) -> bytes:

        return to_json(self._message(job))

    @staticmethod
    def _task_event_msg(e: dict[str, Any]) -> Any:
        from google.cloud import batch_v1

        ev = batch_v1.StatusEvent(
            type_="STATUS_CHANGED",
            description=e["description"],
            event_time=e["time"],
            task_state=batch_v1.TaskStatus.State[e["state"]],
        )
        if e.get("exit_code") is not None:
            ev.task_execution = batch_v1.TaskExecution(exit_code=e["exit_code"])
        return ev

    # -- logging

    def _list_entries(self, body: bytes) -> bytes:
        from google.cloud.logging_v2.types import ListLogEntriesRequest, ListLogEntriesResponse

        try:
            req = ListLogEntriesRequest.from_json(body.decode(), ignore_unknown_fields=False)
        except Exception as e:
            raise ApiError(400, "INVALID_ARGUMENT", f"Invalid JSON payload: {e}") from None
        projects = {r.split("/")[1] for r in req.resource_names if r.startswith("projects/")}
        if not projects:
            raise ApiError(400, "INVALID_ARGUMENT", "resourceNames is required")
        with self.lock:
            entries = [e for e in self.entries if e["project"] in projects]
        picked = [e for e in entries if matches(req.filter, lambda f, e=e: self._entry_field(e, f))]
        if req.order_by == "timestamp desc":
            picked.reverse()
        size = min(req.page_size or ENTRY_PAGE, ENTRY_PAGE)
        start = int(req.page_token or 0)
        page = picked[start : start + size]
        resp = ListLogEntriesResponse(
            entries=[self._entry_msg(e) for e in page],
            next_page_token=str(start + size) if start + size < len(picked) else "",
        )
        return to_json(resp)

    @staticmethod
    def _entry_field(entry: dict[str, Any], field: str) -> Any:
        if field == "logName":
            return entry["log_name"]
        if field.startswith("labels."):
            return entry["labels"].get(field[7:])
        if field == "severity":
            return entry["severity"]
        if field == "timestamp":
            return entry["timestamp"]
        raise ApiError(400, "INVALID_ARGUMENT", f"Unsupported filter field {field!r}")

    @staticmethod
    def _entry_msg(entry: dict[str, Any]) -> Any:
        from google.cloud.logging_v2.types import LogEntry

        return LogEntry(
            log_name=entry["log_name"],
            text_payload=entry["text"],
            timestamp=_parse_time(entry["timestamp"]),
            severity=SEVERITY[entry["severity"]],
            insert_id=entry["insert_id"],
            labels=entry["labels"],
        )

    def _log(self, job: FakeJob, task: FakeTask, text: str, severity: str) -> None:
        with self.lock:
            self.entries.append(
                {
                    "project": job.project,
                    "log_name": f"projects/{job.project}/logs/batch_task_logs",
                    "text": text.rstrip("\n"),
                    "timestamp": _rfc3339(_now()),
                    "severity": severity,
                    "insert_id": uuid.uuid4().hex,
                    "labels": {
                        "job_uid": job.uid,
                        "task_id": f"{job.uid}-group0-{task.index}",
                        "task_group_name": f"{job.name}/taskGroups/group0",
                    },
                }
            )

    # -- the controller that runs jobs

    def _job_event(self, job: FakeJob, state: str) -> None:
        old, job.state = job.state, state
        job.updated = _now()
        job.events.append(
            {
                "state": state,
                "time": job.updated,
                "description": f"Job state is set from {old} to {state} for job {job.name}.",
            }
        )

    def _task_event(
        self, job: FakeJob, task: FakeTask, state: str, exit_code: int | None = None
    ) -> None:
        old, task.state = task.state, state
        where = f"zones/{job.location}-a/instances/{job.uid[:20]}-{task.index}"
        text = f"Task state is updated from {old} to {state} on {where}"
        if exit_code is not None:
            text += f" with exit code {exit_code}"
        task.events.append(
            {"state": state, "time": _now(), "description": text + ".", "exit_code": exit_code}
        )
        job.updated = _now()

    def _control(self) -> None:
        while not self.stopping.wait(0.2):
            with self.lock:
                jobs = list(self.jobs.values())
            for job in jobs:
                try:
                    self._advance(job)
                except Exception as e:  # a broken job must not stop the controller
                    with self.lock:
                        for task in job.tasks:
                            self._kill(task)
                        job.events.append(
                            {"state": "FAILED", "time": _now(), "description": f"fake: {e}"}
                        )
                        job.state = "FAILED"

    def _advance(self, job: FakeJob) -> None:
        if job.deleted_at is not None:
            if time.monotonic() - job.deleted_at > 1:
                with self.lock:
                    self.jobs.pop(job.name, None)
            return
        if job.delete:
            with self.lock:
                if job.state not in TERMINAL:
                    self._job_event(job, "DELETION_IN_PROGRESS")
                for task in job.tasks:
                    self._kill(task)
                job.deleted_at = time.monotonic()
            return
        if job.state in TERMINAL:
            return
        if job.cancel:
            with self.lock:
                self._job_event(job, "CANCELLATION_IN_PROGRESS")
            for task in job.tasks:
                self._kill(task)
                with self.lock:
                    if task.state in ("PENDING", "ASSIGNED"):
                        self._task_event(job, task, "UNEXECUTED")
                    elif task.state == "RUNNING":
                        self._task_event(job, task, "FAILED", 143)
            with self.lock:
                self._job_event(job, "CANCELLED")
            return
        if job.state == "QUEUED":
            with self.lock:
                self._job_event(job, "SCHEDULED")
            return
        if job.state == "SCHEDULED" and job.project in self.quota_projects:
            with self.lock:
                said = [e for e in job.events if "inadequate quotas" in e["description"]]
                if not said:
                    job.updated = _now()
                    job.events.append(
                        {
                            "state": "SCHEDULED",
                            "time": job.updated,
                            "description": "Quota checking process decides to delay scheduling"
                            f" for the job {job.uid} due to inadequate quotas [Quota: CPUS,"
                            " limit: 24, usage: 24, wanted: 4.].",
                        }
                    )
            return
        if job.state == "SCHEDULED" and job.project in self.idle_projects:
            with self.lock:
                for task in job.tasks:
                    self._task_event(job, task, "ASSIGNED")
                    self._task_event(job, task, "RUNNING")  # runs until cancelled
                self._job_event(job, "RUNNING")
            return
        timed = self.timed_projects.get(job.project)
        for task in job.tasks:
            if (task.preempt or task.fail_code is not None) and task.state == "RUNNING":
                code = 50001 if task.preempt else int(task.fail_code or 1)
                task.preempt, task.fail_code = False, None
                self._kill(task)
                spec = job.job.task_groups[0].task_spec
                with self.lock:
                    self._task_event(job, task, "FAILED", code)
                    if not self.retried(spec, code, task.attempt):
                        continue
                    task.attempt += 1
                    self._task_event(job, task, "ASSIGNED")
                if timed is not None:
                    task.started = time.monotonic()
                    with self.lock:
                        self._task_event(job, task, "RUNNING")
                else:
                    self._start(job, task)
                continue
            if timed is not None and task.state == "RUNNING":
                if time.monotonic() - task.started >= timed:
                    with self.lock:
                        self._task_event(job, task, "SUCCEEDED", 0)
                continue
            if task.state != "RUNNING" or task.container is None:
                continue
            limit = job.job.task_groups[0].task_spec.max_run_duration.seconds
            if limit and time.monotonic() - task.started >= limit:
                # as GCP Batch ends a task that runs past maxRunDuration: exit code 50005
                self._kill(task)
                with self.lock:
                    self._task_event(job, task, "FAILED", 50005)
                continue
            task.container.reload()
            if task.container.status not in ("exited", "dead"):
                continue
            code = int(task.container.attrs["State"]["ExitCode"])
            for pump in task.pumps:
                pump.join(5)
            self._remove(task)
            if code == 0:
                with self.lock:
                    self._task_event(job, task, "SUCCEEDED", 0)
            elif self.retried(job.job.task_groups[0].task_spec, code, task.attempt):
                with self.lock:
                    self._task_event(job, task, "FAILED", code)
                    task.attempt += 1
                    self._task_event(job, task, "ASSIGNED")
                self._start(job, task)
            else:
                # as on GCP, a task that fails for good leaves its siblings running
                with self.lock:
                    self._task_event(job, task, "FAILED", code)
        # at most ``parallelism`` tasks run at once; the next waits for a free slot
        group = job.job.task_groups[0]
        limit = int(group.parallelism or 0) or len(job.tasks)
        running = sum(1 for t in job.tasks if t.state in ("ASSIGNED", "RUNNING"))
        for task in job.tasks:
            if running >= limit:
                break
            if task.state == "PENDING":
                with self.lock:
                    self._task_event(job, task, "ASSIGNED")
                if timed is not None:
                    task.started = time.monotonic()
                    with self.lock:
                        self._task_event(job, task, "RUNNING")
                else:
                    self._start(job, task)
                running += 1
        if job.state == "SCHEDULED":
            with self.lock:
                self._job_event(job, "RUNNING")
        states = {t.state for t in job.tasks}
        if states <= {"SUCCEEDED", "FAILED", "UNEXECUTED"}:
            with self.lock:
                self._job_event(job, "SUCCEEDED" if states == {"SUCCEEDED"} else "FAILED")

    def _start(self, job: FakeJob, task: FakeTask) -> None:
        group = job.job.task_groups[0]
        spec = group.task_spec
        task.started = time.monotonic()  # maxRunDuration counts from here
        container = next(
            r.container for r in spec.runnables if r.container and r.container.image_uri
        )
        env: dict[str, str] = dict(spec.environment.variables)
        if task.index < len(group.task_environments):
            env.update(group.task_environments[task.index].variables)
        n = len(job.tasks)
        hosts = self.root / job.uid / "hosts"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text("127.0.0.1\n" * n)
        env.update(
            {
                "BATCH_TASK_INDEX": str(task.index),
                "BATCH_TASK_COUNT": str(n),
                "BATCH_TASK_RETRY_ATTEMPT": str(task.attempt),
                "BATCH_JOB_UID": job.uid,
                "BATCH_HOSTS_FILE": HOSTS_FILE,
                "BATCH_MAIN_NODE_HOSTNAME": "127.0.0.1",
            }
        )
        binds = [f"{hosts}:{HOSTS_FILE}:ro"]
        for bind in container.volumes:
            src, _, rest = bind.partition(":")
            if src.startswith("/mnt/disks/"):
                local = self.root / "disks" / src.strip("/").replace("/", "_")
                local.mkdir(parents=True, exist_ok=True)
                src = str(local)
            binds.append(f"{src}:{rest}")
        # tasks share the host's network and, since torchrun tells nodes apart by host name and
        # pid, its pids too (each container would otherwise be pid 1 on the same host)
        kwargs: dict[str, Any] = {"network_mode": "host", "pid_mode": "host"}
        opts = shlex.split(container.options)
        for i, opt in enumerate(opts):
            if opt.startswith("--shm-size="):
                kwargs["shm_size"] = opt.split("=", 1)[1]
            elif opt.startswith("--device="):
                kwargs.setdefault("devices", []).append(opt.split("=", 1)[1])
            elif opt == "--privileged":
                kwargs["privileged"] = True
            elif opt in ("--net", "--network") and opts[i + 1 : i + 2] != ["host"]:
                raise RuntimeError(
                    f"this emulation runs containers with host networking only: {container.options}"
                )
        image = container.image_uri
        try:
            self.docker.images.get(image)
        except Exception:
            self.docker.images.pull(image, auth_config=self.registry_auth)
        task.container = self.docker.containers.run(
            image,
            command=list(container.commands) or None,
            entrypoint=container.entrypoint or None,
            environment=env,
            volumes=binds,
            detach=True,
            labels={"torchx-nb-gcp-fake": str(self.port)},
            **kwargs,
        )
        with self.lock:
            self._task_event(job, task, "RUNNING")
        task.pumps = [
            threading.Thread(
                target=self._pump, args=(job, task, task.container, True), daemon=True
            ),
            threading.Thread(
                target=self._pump, args=(job, task, task.container, False), daemon=True
            ),
        ]
        for pump in task.pumps:
            pump.start()

    def _pump(self, job: FakeJob, task: FakeTask, container: Any, stdout: bool) -> None:
        from torchx_nb.schedulers.logs import LineSplitter

        lines = LineSplitter()
        severity = "INFO" if stdout else "ERROR"
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=stdout, stderr=not stdout):
                for line in lines.feed(chunk):
                    self._log(job, task, line, severity)
            for line in lines.flush():
                self._log(job, task, line, severity)
        except Exception:
            pass

    def _kill(self, task: FakeTask) -> None:
        if task.container is None:
            return
        with contextlib.suppress(Exception):
            task.container.kill()
        self._remove(task)

    @staticmethod
    def _remove(task: FakeTask) -> None:
        container, task.container = task.container, None
        if container is None:
            return
        with contextlib.suppress(Exception):
            container.remove(force=True)
