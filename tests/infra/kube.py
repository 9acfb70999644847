"""A Kubernetes API server of our own on 127.0.0.1 for the real ``kubernetes`` client, with a
small controller that runs pods in our dockerd. No kube-apiserver can be had offline (see
test-infrastructure.md §6); this serves the parts torchx_nb uses, with Kubernetes' semantics:

- namespaces (read), Volcano queues (read), Volcano jobs (``batch.volcano.sh/v1alpha1``) and
  ``batch/v1`` Jobs (create, get, list with label selectors and ``limit``/``continue`` pages,
  delete with foreground propagation: ``deletionTimestamp`` until the pods are gone), Services
  (create, delete), pods (list, get, log with ``follow``, ``sinceSeconds`` and ``timestamps``);
  errors are ``Status`` objects (404, 403 for verbs listed in ``forbidden``, 401 without the
  kubeconfig's bearer token, the Volcano admission webhook's refusal of an unknown queue).
- The controller makes a pod per Volcano task (``NAME-TASK-0``, with the ``svc`` plugin's
  ``VC_<TASK>_HOSTS`` variables) or per completion index of an Indexed Job (hostname
  ``NAME-I``, the ``job-completion-index`` annotation and label, ``$(VAR)`` expansion and
  ``fieldRef`` env, ``JOB_COMPLETION_INDEX``), runs each pod's container in dockerd and
  reports phases, exit codes and logs back through the API. Volcano's ``RestartJob`` policy
  and a Job's ``backoffLimit`` are honoured, and so are ``parallelism``,
  ``backoffLimitPerIndex`` (``completedIndexes`` and ``failedIndexes``), ``podFailurePolicy``
  as the Job controller evaluates it (the first rule that matches: ``Ignore`` — not counted,
  the pod replaced —, ``FailIndex``, ``FailJob``; ``onExitCodes`` ``In``/``NotIn`` and
  ``onPodConditions``), an eviction (``pods/NAME/eviction``: the ``DisruptionTarget``
  condition, SIGTERM, the kill after ``deleteOptions.gracePeriodSeconds``, then the pod leaves
  the API), a DELETE of a pod (the same without the condition; one that never started ends
  ``Failed`` at once, as the pod GC fails an unscheduled pod being deleted), a PATCH of a
  pod's or a Job's annotations (a pod's downward API ``annotations`` file follows),
  required node affinity against the one node's labels, and (with ``backoffLimitPerIndex``) a
  PATCH of ``spec.suspend``: the running pods are deleted, no new one starts, and the Job is
  ``Suspended`` with its ended indexes kept. ``held`` pauses the controller (a slow Job
  controller: no pod is made or counted meanwhile).

Where it differs from a cluster: every pod shares this machine's network and pid namespace, and
pod DNS names (``NAME-0.NAME``) resolve to 127.0.0.1 through the container's hosts file; there
is no scheduler, no node, no image pull secret check, no Volcano gang scheduling (pods start as
soon as they are made); when a pod fails for good, the others are stopped (but for
``backoffLimitPerIndex``)."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
INSTANCE = "app.kubernetes.io/instance"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


class Status(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> bytes:
        return json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": self.message,
                "reason": self.reason,
                "code": self.code,
            }
        ).encode()


def _bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (``64Mi``, ``1G``, ``512``) in bytes; 0 when unset."""
    m = re.fullmatch(r"(\d+)(Mi|M|Gi|G)?", quantity)
    if not m:
        return 0
    return int(m.group(1)) * {"Mi": 2**20, "M": 10**6, "Gi": 2**30, "G": 10**9, None: 1}[m.group(2)]


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Equality (``k=v``, ``k==v``, ``k!=v``) and existence (``k``, ``!k``) terms, comma-joined."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = re.split(r"==?", term, maxsplit=1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class Pod:
    """A pod's object and what runs it."""

    def __init__(self, obj: dict[str, Any], owner: tuple[str, str]) -> None:
        self.obj = obj
        self.owner = owner
        self.container: Any = None
        self.lines: list[tuple[float, str]] = []
        self.pump: threading.Thread | None = None
        self.done = threading.Event()
        self.downward: Path | None = None  # the downward API volume's folder


class KubeFake:
    """The API server and its controller; ``start()`` with a docker client, ``stop()`` after."""

    def __init__(self, root: Path, docker: Any, volcano: bool = True) -> None:
        self.root = root
        self.docker = docker
        self.volcano = volcano
        self.token = secrets.token_urlsafe(24)
        self.namespaces = {"default", "kube-system"}
        self.queues = {"default"}
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], Pod] = {}
        self.forbidden: set[tuple[str, str]] = set()
        self.events: list[dict[str, Any]] = []
        # a namespace's ResourceQuota on limits.memory (bytes per pod), as admission enforces it
        self.memory_quota: dict[str, int] = {}
        # the one node the scheduler places pods on: its labels and taints; claims that are not
        # bound; scheduling gates an admission webhook (Kueue) adds to every new pod
        self.node_labels = {"kubernetes.io/hostname": "fake-node", "kubernetes.io/os": "linux"}
        self.node_taints: list[dict[str, str]] = []
        self.unbound_claims: set[str] = set()
        self.scheduling_gates: list[str] = []
        # a cluster policy's activeDeadlineSeconds on every new pod (a mutating webhook's)
        self.active_deadline: int | None = None
        self.requests: list[str] = []
        self.evictions: list[tuple[str, str, int]] = []  # (namespace, pod, grace seconds)
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.held = threading.Event()  # set: the controller waits (makes and ends nothing)

    # -- lifecycle

    def start(self) -> KubeFake:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # logs are streamed in chunks, as kube-apiserver does

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                fake._serve(self)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.kubeconfig = self.root / "kubeconfig"
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "tester", "user": {"token": self.token}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "tester"}}
                    ],
                    "current-context": "fake",
                }
            )
        )
        self.kubeconfig.chmod(0o600)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._control, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            pods = list(self.pods.values())
        for pod in pods:
            self._kill(pod)
        self.server.shutdown()
        self.server.server_close()

    # -- HTTP

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"{}") if length else {}
        try:
            if h.headers.get("Authorization") != f"Bearer {self.token}":
                raise Status(401, "Unauthorized", "Unauthorized")
            self.requests.append(f"{h.command} {url.path}")
            if url.path.endswith("/log") and h.command == "GET":
                self._log(h, url.path, query)
                return
            code, out = self._route(h.command, url.path, query, body)
            data = json.dumps(out).encode()
        except Status as e:
            code, data = e.code, e.body()
        except Exception as e:  # a bug here must reach the test as an answer, not a hang
            import traceback

            traceback.print_exc()
            code, data = 500, Status(500, "InternalError", repr(e)).body()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    _ROUTES = [
        (r"^/api/v1/namespaces/([^/]+)$", "namespace"),
        (r"^/apis/scheduling\.volcano\.sh/v1beta1/queues/([^/]+)$", "queue"),
        (r"^/apis/batch\.volcano\.sh/v1alpha1/namespaces/([^/]+)/jobs(?:/([^/]+))?$", "vcjob"),
        (
            r"^/apis/scheduling\.volcano\.sh/v1beta1/namespaces/([^/]+)/podgroups/([^/]+)$",
            "podgroup",
        ),
        (r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$", "job"),
        (r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$", "service"),
        (r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$", "pod"),
        (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$", "eviction"),
        (r"^/api/v1/namespaces/([^/]+)/events$", "event"),
    ]
    _PLURAL = {
        "vcjob": "jobs.batch.volcano.sh",
        "job": "jobs.batch",
        "service": "services",
        "pod": "pods",
        "eviction": "pods/eviction",
        "event": "events",
    }

    def _route(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, Any]:
        found = next(
            ((m, kind) for pattern, kind in self._ROUTES if (m := re.match(pattern, path))), None
        )
        if found is None:
            raise Status(404, "NotFound", "the server could not find the requested resource")
        m, kind = found
        if kind == "namespace":
            if m.group(1) not in self.namespaces:
                raise Status(404, "NotFound", f'namespaces "{m.group(1)}" not found')
            return 200, {"kind": "Namespace", "metadata": {"name": m.group(1)}}
        if kind == "queue":
            if not self.volcano:
                raise Status(404, "NotFound", "the server could not find the requested resource")
            if m.group(1) not in self.queues:
                raise Status(
                    404, "NotFound", f'queues.scheduling.volcano.sh "{m.group(1)}" not found'
                )
            return 200, {"kind": "Queue", "metadata": {"name": m.group(1)}}
        if kind in ("vcjob", "podgroup") and not self.volcano:
            raise Status(404, "NotFound", "the server could not find the requested resource")
        if kind == "podgroup":
            found_pg = self.objects.get(("podgroup", m.group(1), m.group(2)))
            if found_pg is None or method != "GET":
                raise Status(
                    404, "NotFound", f'podgroups.scheduling.volcano.sh "{m.group(2)}" not found'
                )
            return 200, found_pg
        if kind == "event":
            if method != "GET":
                raise Status(405, "MethodNotAllowed", "this server only lists events")
            return 200, self._list_events(m.group(1), query)
        ns, name = m.group(1), m.group(2)
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch"}.get(
            method, "get" if name else "list"
        )
        if (verb, kind) in self.forbidden:
            raise Status(
                403,
                "Forbidden",
                f'{self._PLURAL[kind]} is forbidden: User "tester" cannot {verb} resource'
                f' "{self._PLURAL[kind].split(".")[0]}" in the namespace "{ns}"',
            )
        if ns not in self.namespaces:
            raise Status(404, "NotFound", f'namespaces "{ns}" not found')
        if kind == "eviction":
            self._evict(ns, name, body)
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if verb == "create":
            return 201, self._create(kind, ns, body)
        if verb == "list":
            return 200, self._list(kind, ns, query)
        with self.lock:
            obj = self.objects.get((kind, ns, name))
        if obj is None:
            raise Status(404, "NotFound", f'{self._PLURAL[kind]} "{name}" not found')
        if verb == "delete":
            if "gracePeriodSeconds" in query:  # the client sends it as a parameter
                body = {**body, "gracePeriodSeconds": int(query["gracePeriodSeconds"])}
            self._delete(kind, ns, name, body)
        if verb == "patch" and kind == "pod":
            if set(body) != {"metadata"} or set(body["metadata"]) != {"annotations"}:
                raise Status(
                    422, "Invalid", f"this server patches only a pod's annotations: {body}"
                )
            with self.lock:
                obj["metadata"].setdefault("annotations", {}).update(
                    body["metadata"]["annotations"]
                )
                pod = self.pods.get((ns, name))
            if pod is not None:
                self._project(pod)
        elif verb == "patch" and kind == "job" and set(body) == {"metadata"}:
            if set(body["metadata"]) != {"annotations"}:
                raise Status(
                    422, "Invalid", f"this server patches only a Job's annotations: {body}"
                )
            with self.lock:  # a merge patch: a null value removes the key
                annotations = obj["metadata"].setdefault("annotations", {})
                for k, v in body["metadata"]["annotations"].items():
                    if v is None:
                        annotations.pop(k, None)
                    else:
                        annotations[k] = v
        elif verb == "patch":
            if kind != "job" or set(body) != {"spec"} or set(body["spec"]) != {"suspend"}:
                raise Status(
                    422, "Invalid", f"this server patches only a Job's spec.suspend: {body}"
                )
            with self.lock:
                obj["spec"]["suspend"] = bool(body["spec"]["suspend"])
        return 200, obj

    def _create(self, kind: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("metadata", {}).get("name", "")
        if not re.match(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", name):
            raise Status(422, "Invalid", f'{kind} "{name}" is invalid: metadata.name')
        if kind == "vcjob":
            queue = body.get("spec", {}).get("queue", "")
            if queue not in self.queues:
                raise Status(
                    400,
                    "BadRequest",
                    'admission webhook "validatejob.volcano.sh" denied the request: unable to'
                    f' find job queue: queues.scheduling.volcano.sh "{queue}" not found',
                )
        with self.lock:
            if (kind, ns, name) in self.objects:
                raise Status(409, "AlreadyExists", f'{self._PLURAL[kind]} "{name}" already exists')
            body.setdefault("metadata", {}).update(
                {"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _now()}
            )
            body["status"] = {}
            self.objects[(kind, ns, name)] = body
        return body

    def _list(self, kind: str, ns: str, query: dict[str, str]) -> dict[str, Any]:
        selector = query.get("labelSelector", "")
        with self.lock:
            items = [
                o
                for (k, n, _), o in sorted(self.objects.items())
                if k == kind and n == ns and selects(selector, o["metadata"].get("labels") or {})
            ]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start : start + limit]
        more = start + limit < len(items)
        return {
            "kind": "List",
            "metadata": {"continue": str(start + limit) if more else ""},
            "items": page,
        }

    _EVENT_FIELDS = {
        "involvedObject.name": lambda e: e["involvedObject"]["name"],
        "involvedObject.kind": lambda e: e["involvedObject"]["kind"],
        "type": lambda e: e["type"],
        "reason": lambda e: e["reason"],
    }

    def _list_events(self, ns: str, query: dict[str, str]) -> dict[str, Any]:
        """Core v1 events of ``ns``, filtered by a ``fieldSelector`` of ``a=b`` terms (the
        fields kube-apiserver indexes for events); paged like every list."""
        terms = [t.split("=", 1) for t in query.get("fieldSelector", "").split(",") if t]
        for field_name, _ in terms:
            if field_name not in self._EVENT_FIELDS:
                raise Status(
                    400,
                    "BadRequest",
                    f'"{field_name}" is not a known field selector: only'
                    f" {', '.join(self._EVENT_FIELDS)}",
                )
        with self.lock:
            items = [
                e
                for e in self.events
                if e["metadata"]["namespace"] == ns
                and all(self._EVENT_FIELDS[f](e) == v for f, v in terms)
            ]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        more = start + limit < len(items)
        return {
            "kind": "EventList",
            "apiVersion": "v1",
            "metadata": {"continue": str(start + limit) if more else ""},
            "items": items[start : start + limit],
        }

    def record_event(
        self, ns: str, kind: str, name: str, reason: str, message: str, type_: str = "Warning"
    ) -> None:
        """An event about ``kind/name``, counted again (not repeated) when the same reason
        recurs, as the event correlator folds similar events."""
        now = _now()
        with self.lock:
            for e in self.events:
                same = e["involvedObject"] == {"kind": kind, "name": name, "namespace": ns}
                if same and e["reason"] == reason:
                    e.update(count=e["count"] + 1, lastTimestamp=now, message=message)
                    return
            self.events.append(
                {
                    "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": ns},
                    "involvedObject": {"kind": kind, "name": name, "namespace": ns},
                    "type": type_,
                    "reason": reason,
                    "message": message,
                    "count": 1,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "source": {"component": "job-controller"},
                }
            )

    def _delete(self, kind: str, ns: str, name: str, body: dict[str, Any]) -> None:
        if kind == "pod":
            self._evict(ns, name, body, evicted=False)
            return
        with self.lock:
            obj = self.objects[(kind, ns, name)]
            if kind in ("vcjob", "job") and body.get("propagationPolicy") == "Foreground":
                obj["metadata"]["deletionTimestamp"] = _now()
            else:
                self._drop_owned(kind, ns, name)
                self.objects.pop((kind, ns, name), None)

    def _evict(
        self, ns: str, name: str, body: dict[str, Any] | None = None, evicted: bool = True
    ) -> None:
        """The Eviction API: the pod gets the ``DisruptionTarget`` condition and a
        ``deletionTimestamp``, its container SIGTERM, then SIGKILL after the grace
        (``deleteOptions.gracePeriodSeconds``, else the pod's ``terminationGracePeriodSeconds``,
        30 s); it ends ``Failed`` (or as its program exited) and then leaves the API (its owner's
        controller still counts it, as the Job controller's tracking finalizer lets it).
        ``evicted=False``: a plain DELETE of the pod (``gracePeriodSeconds`` in the body), the
        same without the condition; a pod that never started (unschedulable) ends ``Failed``
        with no exit code at once, as the pod GC fails an unscheduled pod being deleted."""
        with self.lock:
            pod = self.pods.get((ns, name))
            if pod is None or ("pod", ns, name) not in self.objects:
                raise Status(404, "NotFound", f'pods "{name}" not found')
            if pod.obj["metadata"].get("deletionTimestamp"):
                return  # being deleted already: the eviction has nothing to do
            options = (body or {}).get("deleteOptions") if evicted else body
            grace = (options or {}).get("gracePeriodSeconds")
            if grace is None:
                grace = pod.obj["spec"].get("terminationGracePeriodSeconds", 30)
            pod.obj["metadata"]["deletionTimestamp"] = _now()
            status = pod.obj["status"]
            if evicted:
                status["conditions"] = [
                    *(status.get("conditions") or []),
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "EvictionByEvictionAPI",
                        "message": "Eviction API: evicting",
                        "lastTransitionTime": _now(),
                    },
                ]
                self.evictions.append((ns, name, int(grace)))
            elif pod.container is None and status.get("phase") == "Pending":
                pod.obj["status"] = {**status, "phase": "Failed"}
                pod.done.set()
                self.objects.pop(("pod", ns, name), None)
                return

        def terminate() -> None:
            if pod.container is not None and status.get("phase") == "Running":
                with contextlib.suppress(Exception):
                    pod.container.stop(timeout=int(grace))
                pod.done.wait(30)
            else:
                self._kill(pod, failed=True)
            with self.lock:
                self.objects.pop(("pod", ns, name), None)

        threading.Thread(target=terminate, daemon=True).start()

    @staticmethod
    def policy_action(spec: dict[str, Any], pod: Pod) -> str:
        """What the Job's ``podFailurePolicy`` does with the failed ``pod``: the action of its
        first rule that matches (``onExitCodes``: ``In``/``NotIn`` on a container's non-zero
        exit code; ``onPodConditions``: a condition of that type and status), else ``Count``
        (the pod counts against the backoff limit), as the Job controller evaluates it."""
        status = pod.obj["status"]
        codes = [
            ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
            for cs in status.get("containerStatuses") or []
        ]
        conds = {(c.get("type"), c.get("status")) for c in status.get("conditions") or []}
        for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
            on_codes = rule.get("onExitCodes")
            if on_codes:
                values = set(on_codes.get("values") or [])
                inside = on_codes.get("operator") == "In"
                if any(c and ((c in values) == inside) for c in codes):
                    return str(rule["action"])
            for want in rule.get("onPodConditions") or []:
                if (want.get("type"), want.get("status", "True")) in conds:
                    return str(rule["action"])
        return "Count"

    @staticmethod
    def _project(pod: Pod) -> None:
        """The downward API volume's ``annotations`` file (``key="value"`` lines, as the kubelet
        writes them), rewritten when the pod's annotations change."""
        if pod.downward is None:
            return
        annotations = pod.obj["metadata"].get("annotations") or {}
        text = "".join(f"{k}={json.dumps(str(v))}\n" for k, v in sorted(annotations.items()))
        tmp = pod.downward / ".annotations.tmp"
        tmp.write_text(text)
        tmp.replace(pod.downward / "annotations")

    def _drop_owned(self, kind: str, ns: str, name: str) -> None:
        for key, pod in list(self.pods.items()):
            if pod.owner == (kind, name) and key[0] == ns:
                self._kill(pod)
                self.pods.pop(key, None)
                self.objects.pop(("pod", ns, key[1]), None)

    # -- logs

    def _log(self, h: BaseHTTPRequestHandler, path: str, query: dict[str, str]) -> None:
        ns, name = path.split("/")[4], path.split("/")[6]
        with self.lock:
            pod = self.pods.get((ns, name))
        if pod is None:
            raise Status(404, "NotFound", f'pods "{name}" not found')
        follow = query.get("follow") == "true"
        stamps = query.get("timestamps") == "true"
        since = time.time() - int(query["sinceSeconds"]) if query.get("sinceSeconds") else 0.0
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        sent = 0
        try:
            while True:
                lines = pod.lines[sent:]
                sent += len(lines)
                data = b"".join(
                    ((_stamp(t) + " ") if stamps else "").encode() + line.encode()
                    for t, line in lines
                    if t >= since
                )
                if data:
                    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    h.wfile.flush()
                if not follow or (pod.done.is_set() and sent == len(pod.lines)):
                    h.wfile.write(b"0\r\n\r\n")
                    return
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            return

    # -- controller

    def _control(self) -> None:
        while not self.stopping.wait(0.2):
            if self.held.is_set():  # a slow Job controller: nothing is advanced meanwhile
                continue
            with self.lock:
                jobs = [(k, o) for k, o in self.objects.items() if k[0] in ("vcjob", "job")]
            for key, obj in jobs:
                try:
                    self._advance(key, obj)
                except Exception as e:
                    import traceback

                    traceback.print_exc()
                    obj["status"]["fakeError"] = repr(e)

    def _owned(self, kind: str, ns: str, name: str) -> list[Pod]:
        with self.lock:
            return [p for (pns, _), p in self.pods.items() if pns == ns and p.owner == (kind, name)]

    def _advance(self, key: tuple[str, str, str], obj: dict[str, Any]) -> None:
        kind, ns, name = key
        if obj["metadata"].get("deletionTimestamp"):
            with self.lock:
                self._drop_owned(kind, ns, name)
                self.objects.pop(key, None)
            return
        if kind == "vcjob":
            self._advance_volcano(ns, name, obj)
        else:
            self._advance_indexed(ns, name, obj)

    def _advance_volcano(self, ns: str, name: str, obj: dict[str, Any]) -> None:
        status = obj["status"]
        phase = status.setdefault("state", {}).get("phase")
        if phase in ("Completed", "Failed", "Aborted", "Terminated"):
            return
        tasks = obj["spec"]["tasks"]
        if phase is None:
            status["state"] = {"phase": "Pending"}
            status["retryCount"] = 0
            return
        pods = self._owned("vcjob", ns, name)
        group = f"{name}-{abs(hash((ns, name))) % 10**8:08d}"  # as Volcano: NAME-UID
        if not pods:
            hosts = {
                f"VC_{t['name'].upper().replace('-', '_')}_HOSTS": f"{name}-{t['name']}-0.{name}"
                for t in tasks
            }
            self.objects[("podgroup", ns, group)] = {
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": ns},
                "spec": {"minMember": len(tasks), "queue": obj["spec"].get("queue")},
                "status": {"phase": "Pending"},
            }
            for i, task in enumerate(tasks):
                extra = {**hosts, "VC_TASK_INDEX": "0", "VK_TASK_INDEX": "0"}
                template = json.loads(json.dumps(task["template"]))
                template.setdefault("metadata", {}).setdefault("annotations", {})[
                    "scheduling.k8s.io/group-name"
                ] = group
                self._make_pod(
                    ("vcjob", name),
                    ns,
                    f"{name}-{task['name']}-0",
                    template,
                    extra,
                    hostname=f"{name}-{task['name']}-0",
                    subdomain=name,
                    index=i,
                )
            pods = self._owned("vcjob", ns, name)
            stuck = [
                p
                for p in pods
                if any(
                    c.get("type") == "PodScheduled" and c.get("status") == "False"
                    for c in p.obj["status"].get("conditions") or []
                )
            ]
            pg = self.objects[("podgroup", ns, group)]
            if stuck:  # as Volcano's gang plugin: the whole group waits, and says why
                n = len(tasks)
                pg["status"] = {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "Unschedulable",
                            "status": "True",
                            "reason": "NotEnoughResources",
                            "message": f"{n}/{n} tasks in gang unschedulable: pod group is"
                            f" not ready, {n} Pending, {n} minAvailable; Pending: {len(stuck)}"
                            " Unschedulable",
                        }
                    ],
                }
                status["state"] = {"phase": "Pending"}
                return
            pg["status"] = {"phase": "Running"}
            status["state"] = {"phase": "Running"}
            status.setdefault("startTime", _now())
            return
        if status["state"].get("phase") == "Pending":
            return  # the gang waits (an unschedulable task)
        phases = [p.obj["status"].get("phase") for p in pods]
        if all(p == "Succeeded" for p in phases):
            status["state"] = {"phase": "Completed"}
            status["completionTime"] = _now()
        elif "Failed" in phases:
            if status.get("retryCount", 0) < int(obj["spec"].get("maxRetry") or 0):
                status["retryCount"] = status.get("retryCount", 0) + 1
                status["state"] = {"phase": "Restarting"}
                with self.lock:
                    self._drop_owned("vcjob", ns, name)
            else:
                for p in pods:
                    if p.obj["status"].get("phase") in ("Pending", "Running"):
                        self._kill(p, failed=True)
                status["state"] = {"phase": "Failed", "message": "a task's pod failed"}
                status["completionTime"] = _now()

    def _advance_indexed(self, ns: str, name: str, obj: dict[str, Any]) -> None:
        spec, status = obj["spec"], obj["status"]
        if any(c.get("status") == "True" for c in status.get("conditions", [])):
            return
        status.setdefault("startTime", _now())
        pods = self._owned("job", ns, name)
        by_index: dict[int, list[Pod]] = {}
        for p in pods:
            by_index.setdefault(int(p.obj["metadata"]["labels"][INDEX_KEY]), []).append(p)
        if "backoffLimitPerIndex" in spec:
            self._advance_per_index(ns, name, obj, by_index)
            return
        n = int(spec.get("completions") or 1)
        actions = [
            self.policy_action(spec, p) for p in pods if p.obj["status"].get("phase") == "Failed"
        ]
        failed = sum(a != "Ignore" for a in actions)  # an ignored pod is not counted
        status["failed"] = failed
        if failed > int(spec.get("backoffLimit") or 0) or "FailJob" in actions:
            self._fail_job(
                pods,
                status,
                *(
                    ("PodFailurePolicy", "a pod failed matching a FailJob rule")
                    if "FailJob" in actions
                    else ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
                ),
            )
            return
        succeeded = 0
        active = 0
        for i in range(n):
            mine = by_index.get(i, [])
            if any(p.obj["status"].get("phase") == "Succeeded" for p in mine):
                succeeded += 1
                continue
            if any(p.obj["status"].get("phase") in ("Pending", "Running") for p in mine):
                active += 1
                continue
            self._make_index_pod(ns, name, spec, i)
            active += 1
        status["active"], status["succeeded"] = active, succeeded
        if succeeded == n:
            status["conditions"] = [{"type": "Complete", "status": "True"}]
            status["completionTime"] = _now()

    def _advance_per_index(
        self, ns: str, name: str, obj: dict[str, Any], by_index: dict[int, list[Pod]]
    ) -> None:
        """``backoffLimitPerIndex``: each index retries on its own and fails on its own (a
        pod matching a ``FailIndex`` rule of ``podFailurePolicy`` fails its index at once);
        the Job ends when every index has, ``Failed`` (reason ``FailedIndexes``) if any did.
        At most ``parallelism`` pods run at once."""
        spec, status = obj["spec"], obj["status"]
        limit = int(spec["backoffLimitPerIndex"])
        done: set[int] = set()
        failed: set[int] = set()
        busy: set[int] = set()
        counted = 0
        for i, mine in by_index.items():
            phases = [p.obj["status"].get("phase") for p in mine]
            actions = [
                self.policy_action(spec, p) for p in mine if p.obj["status"]["phase"] == "Failed"
            ]
            counted += sum(a != "Ignore" for a in actions)
            if "FailJob" in actions:
                pods = [p for ps in by_index.values() for p in ps]
                self._fail_job(
                    pods, status, "PodFailurePolicy", "a pod failed matching a FailJob rule"
                )
                return
            if "Succeeded" in phases:
                done.add(i)
            elif "FailIndex" in actions or actions.count("Count") > limit:
                failed.add(i)
            elif "Pending" in phases or "Running" in phases:
                busy.add(i)
        n = int(spec.get("completions") or 1)
        if spec.get("suspend"):  # its running pods are deleted (no failure), no new one starts
            for i in busy:
                for pod in self._owned("job", ns, name):
                    labels = pod.obj["metadata"]["labels"]
                    if int(labels[INDEX_KEY]) == i and pod.obj["status"].get("phase") in (
                        "Pending",
                        "Running",
                    ):
                        self._kill(pod)
                        with self.lock:
                            key = (ns, pod.obj["metadata"]["name"])
                            self.pods.pop(key, None)
                            self.objects.pop(("pod", *key), None)
            busy = set()
            status["conditions"] = [
                {"type": "Suspended", "status": "True", "reason": "JobSuspended"}
            ]
        for i in range(n):
            if spec.get("suspend") or len(busy) >= int(spec.get("parallelism") or n):
                break
            if i not in done | failed | busy:
                self._make_index_pod(ns, name, spec, i)
                busy.add(i)
        status.update(
            active=len(busy),
            succeeded=len(done),
            failed=counted,
            completedIndexes=",".join(map(str, sorted(done))),
            failedIndexes=",".join(map(str, sorted(failed))),
        )
        if len(done) + len(failed) == n:
            status["conditions"] = [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "FailedIndexes",
                    "message": "Job has failed indexes",
                }
                if failed
                else {"type": "Complete", "status": "True"}
            ]
            status["completionTime"] = _now()

    def _fail_job(self, pods: list[Pod], status: dict[str, Any], reason: str, message: str) -> None:
        """The Job fails for good: its running pods are stopped."""
        for p in pods:
            if p.obj["status"].get("phase") in ("Pending", "Running"):
                self._kill(p, failed=True)
        status["conditions"] = [
            {"type": "Failed", "status": "True", "reason": reason, "message": message}
        ]
        status["completionTime"] = _now()

    def _make_index_pod(self, ns: str, name: str, spec: dict[str, Any], i: int) -> None:
        """A new pod for completion index ``i`` of the Indexed Job ``name``."""
        self._make_pod(
            ("job", name),
            ns,
            f"{name}-{i}-{secrets.token_hex(3)}",
            spec["template"],
            {},
            hostname=f"{name}-{i}",
            subdomain=spec["template"]["spec"].get("subdomain", ""),
            index=i,
            indexed=True,
        )

    def _make_pod(
        self,
        owner: tuple[str, str],
        ns: str,
        pod_name: str,
        template: dict[str, Any],
        extra_env: dict[str, str],
        hostname: str,
        subdomain: str,
        index: int,
        indexed: bool = False,
    ) -> None:
        limit = (
            template["spec"]["containers"][0].get("resources", {}).get("limits", {}).get("memory")
        )
        quota = self.memory_quota.get(ns)
        if quota is not None and _bytes(str(limit or "0")) > quota:
            self.record_event(  # admission refuses the pod: only its owner's events say so
                ns,
                {"job": "Job", "vcjob": "Job"}[owner[0]],
                owner[1],
                "FailedCreate",
                f'Error creating: pods "{pod_name}" is forbidden: exceeded quota: compute,'
                f" requested: limits.memory={limit}, used: limits.memory=0, limited:"
                f" limits.memory={quota // 2**20}Mi",
            )
            return
        meta = json.loads(json.dumps(template.get("metadata") or {}))
        meta.update({"name": pod_name, "namespace": ns, "creationTimestamp": _now()})
        meta.setdefault("labels", {})
        meta.setdefault("annotations", {})
        if indexed:
            meta["labels"][INDEX_KEY] = str(index)
            meta["annotations"][INDEX_KEY] = str(index)
            extra_env = {**extra_env, "JOB_COMPLETION_INDEX": str(index)}
        spec = json.loads(json.dumps(template["spec"]))
        spec.update({"hostname": hostname, "subdomain": subdomain, "nodeName": "fake-node"})
        if self.scheduling_gates:
            spec["schedulingGates"] = [{"name": g} for g in self.scheduling_gates]
        if self.active_deadline:
            spec["activeDeadlineSeconds"] = self.active_deadline
        obj = {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
        pod = Pod(obj, owner)
        with self.lock:
            self.pods[(ns, pod_name)] = pod
            self.objects[("pod", ns, pod_name)] = obj
        try:
            self._run(pod, extra_env, subdomain)
        except Exception as e:
            obj["status"] = {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "state": {
                            "terminated": {
                                "exitCode": 128,
                                "reason": "StartError",
                                "message": str(e)[:200],
                            }
                        }
                    }
                ],
            }
            pod.done.set()

    def _unschedulable(self, spec: dict[str, Any]) -> tuple[str, str] | None:
        """What kube-scheduler says of a pod its one node cannot take (its words, 1.28+): a
        scheduling gate, an unbound claim, a taint the pod does not tolerate, labels the node
        lacks. None: it fits."""
        if spec.get("schedulingGates"):
            return "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"
        tail = " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        claims = {
            v["persistentVolumeClaim"]["claimName"]
            for v in spec.get("volumes") or []
            if v.get("persistentVolumeClaim")
        }
        if claims & self.unbound_claims:
            return (
                "Unschedulable",
                "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims." + tail,
            )
        for taint in self.node_taints:
            tolerated = any(
                t.get("key") == taint["key"]
                and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
                and t.get("effect") in (None, "", taint["effect"])
                for t in spec.get("tolerations") or []
            )
            if not tolerated:
                said = f"{{{taint['key']}: {taint.get('value', '')}}}"
                return (
                    "Unschedulable",
                    f"0/1 nodes are available: 1 node(s) had untolerated taint {said}." + tail,
                )
        selector = spec.get("nodeSelector") or {}
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {"nodeSelectorTerms": [{}]}
        fits = any(  # terms are ORed, a term's expressions ANDed (operator In)
            all(
                self.node_labels.get(e["key"]) in e.get("values", [])
                for e in term.get("matchExpressions") or []
            )
            for term in required["nodeSelectorTerms"]
        )
        if not fits or any(self.node_labels.get(k) != v for k, v in selector.items()):
            return (
                "Unschedulable",
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
                + tail,
            )
        return None

    def _env(self, pod: Pod, container: dict[str, Any], extra: dict[str, str]) -> dict[str, str]:
        env: dict[str, str] = dict(extra)
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = re.sub(
                    r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                    lambda m: env.get(m.group(1), m.group(0)),
                    e["value"],
                )
            elif "valueFrom" in e:
                path = e["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
                m = re.match(r"^metadata\.annotations\['(.+)'\]$", path)
                if m:
                    env[e["name"]] = pod.obj["metadata"]["annotations"].get(m.group(1), "")
        return env

    def _run(self, pod: Pod, extra: dict[str, str], subdomain: str) -> None:
        spec = pod.obj["spec"]
        c = spec["containers"][0]
        limits = (c.get("resources") or {}).get("limits") or {}
        held = self._unschedulable(spec)
        if held is not None:
            reason, message = held
            pod.obj["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                    }
                ],
            }
            return
        if int(str(limits.get("nvidia.com/gpu", 0) or 0)) > 0:
            # as the real scheduler says it: this cluster's one node has no GPU
            pod.obj["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
                        " preemption: 0/1 nodes are available: 1 No preemption victims found"
                        " for incoming pod.",
                    }
                ],
            }
            return
        env = self._env(pod, c, extra)
        command = [
            re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), a)
            for a in c.get("command", [])
        ]
        binds: list[str] = []
        kwargs: dict[str, Any] = {"network_mode": "host", "pid_mode": "host"}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            v = volumes[m["name"]]
            mode = ":ro" if m.get("readOnly") else ""
            if "emptyDir" in v and m["mountPath"] == "/dev/shm":
                kwargs["shm_size"] = "256m"
            elif "hostPath" in v:
                binds.append(f"{v['hostPath']['path']}:{m['mountPath']}{mode}")
            elif "downwardAPI" in v:  # the pod's annotations, kept up to date (_project)
                pod.downward = self.root / "downward" / pod.obj["metadata"]["name"]
                pod.downward.mkdir(parents=True, exist_ok=True)
                self._project(pod)
                binds.append(f"{pod.downward}:{m['mountPath']}:ro")
            elif "persistentVolumeClaim" in v:
                local = self.root / "pvc" / v["persistentVolumeClaim"]["claimName"]
                local.mkdir(parents=True, exist_ok=True)
                binds.append(f"{local}:{m['mountPath']}{mode}")
        if (c.get("securityContext") or {}).get("privileged"):
            kwargs["privileged"] = True
        memory = _bytes(str(limits.get("memory") or ""))
        if memory:  # the container's memory limit, enforced as the kubelet's cgroup does
            kwargs["mem_limit"] = max(memory, 6 * 2**20)
        # pod DNS names of this job (NAME-I.SUBDOMAIN) point at this machine
        # (and the machine's own name, which torchrun resolves: with extra hosts, docker writes
        # the hosts file itself instead of copying this machine's)
        hosts = {spec["hostname"]: "127.0.0.1", socket.gethostname(): "127.0.0.1"}
        with self.lock:
            for p in self.pods.values():
                if p.obj["spec"].get("subdomain") == subdomain and subdomain:
                    hosts[f"{p.obj['spec']['hostname']}.{subdomain}"] = "127.0.0.1"
        for value in env.values():
            for host in re.findall(r"[a-z0-9-]+-\d+\.[a-z0-9-]+", value):
                hosts[host] = "127.0.0.1"
        image = c["image"]
        try:
            self.docker.images.get(image)
        except Exception:
            try:
                self.docker.images.pull(image)
            except Exception as e:  # as the kubelet: ErrImagePull, then ImagePullBackOff
                waiting = {
                    "reason": "ErrImagePull",
                    "message": f"failed to pull {image}: {e}"[:200],
                }
                pod.obj["status"] = {
                    "phase": "Pending",
                    "containerStatuses": [
                        {"name": c["name"], "image": image, "state": {"waiting": waiting}}
                    ],
                }
                threading.Timer(2.0, waiting.update, [{"reason": "ImagePullBackOff"}]).start()
                return
        pod.container = self.docker.containers.run(
            image,
            entrypoint=command[:1] or None,
            command=command[1:] or None,
            environment=env,
            volumes=binds,
            extra_hosts=hosts,
            detach=True,
            labels={"torchx-nb-kube-fake": str(self.port)},
            **kwargs,
        )
        pod.obj["status"] = {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "startTime": _now(),
            "containerStatuses": [{"name": c["name"], "state": {"running": {"startedAt": _now()}}}],
        }
        pod.pump = threading.Thread(target=self._pump, args=(pod,), daemon=True)
        pod.pump.start()

    def _pump(self, pod: Pod) -> None:
        from torchx_nb.schedulers.logs import LineSplitter

        lines = LineSplitter()
        container = pod.container
        deadline = pod.obj["spec"].get("activeDeadlineSeconds")
        hit = threading.Event()

        def past_deadline() -> None:  # what the kubelet does at activeDeadlineSeconds
            hit.set()
            with contextlib.suppress(Exception):
                container.kill()

        timer = threading.Timer(float(deadline), past_deadline) if deadline else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                for line in lines.feed(chunk):
                    pod.lines.append((time.time(), line))
            for line in lines.flush():
                pod.lines.append((time.time(), line + "\n"))
            code = int(container.wait(timeout=600)["StatusCode"])
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        except Exception:
            code, oom = 137, False
        if timer is not None:
            timer.cancel()
        if hit.is_set() and pod.obj["status"].get("phase") == "Running":
            pod.obj["status"] = {
                **pod.obj["status"],
                "phase": "Failed",
                "reason": "DeadlineExceeded",
                "message": "Pod was active on the node longer than the specified deadline",
                "containerStatuses": [
                    {
                        "name": pod.obj["spec"]["containers"][0]["name"],
                        "state": {
                            "terminated": {"exitCode": 137, "reason": "Error", "finishedAt": _now()}
                        },
                    }
                ],
            }
        if pod.obj["status"].get("phase") == "Running":
            pod.obj["status"] = {
                **pod.obj["status"],
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": pod.obj["spec"]["containers"][0]["name"],
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": "Completed"
                                if code == 0
                                else "OOMKilled"
                                if oom
                                else "Error",
                                "finishedAt": _now(),
                            }
                        },
                    }
                ],
            }
        with contextlib.suppress(Exception):
            container.remove(force=True)
        pod.done.set()

    def _kill(self, pod: Pod, failed: bool = False) -> None:
        if failed and pod.obj["status"].get("phase") in ("Pending", "Running"):
            pod.obj["status"] = {
                **pod.obj["status"],
                "phase": "Failed",
                "containerStatuses": [
                    {"state": {"terminated": {"exitCode": 137, "reason": "Killed"}}}
                ],
            }
        if pod.container is not None:
            with contextlib.suppress(Exception):
                pod.container.kill()
        pod.done.set()

    def pods_of(self, ns: str, name: str) -> Iterator[dict[str, Any]]:
        with self.lock:
            for p in self.pods.values():
                if (
                    p.obj["metadata"].get("labels", {}).get(INSTANCE) == name
                    and p.obj["metadata"]["namespace"] == ns
                ):
                    yield p.obj
