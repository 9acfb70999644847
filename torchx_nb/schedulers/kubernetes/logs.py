"""A replica's log: its latest pod's log, followed while it runs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

from torchx_nb.schedulers.api import LogQuery
from torchx_nb.schedulers.kubernetes.base import KubeJobs
from torchx_nb.schedulers.kubernetes.client import (
    call,
)
from torchx_nb.schedulers.kubernetes.constants import (
    LABEL_INSTANCE,
    LABEL_ROLE_NAME,
)
from torchx_nb.schedulers.kubernetes.describe import (
    _after_timestamp,
    _index_of,
    _latest,
)
from torchx_nb.schedulers.kubernetes.request import (
    _role_label,
    parse_trial_id,
)
from torchx_nb.schedulers.logs import on_tail_stop
from torchx_nb.specs.log_line import LogLine


class KubeLogs(KubeJobs):
    """A replica's log: its latest pod's log, followed while it runs."""

    combined_only: str | None = "the pod log API gives one combined log"

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """Replica ``k``'s pod log (its latest pod), followed while it runs with
        ``should_tail``."""
        namespace, name, index = parse_trial_id(q.app_id)
        desc = self.describe(q.app_id)
        if desc is None:
            raise ValueError(f"unknown app {q.app_id!r}")
        pods = self._pods(namespace, f"{LABEL_INSTANCE}={name}")
        label = _role_label(q.role)
        pod = _latest(
            [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get(LABEL_ROLE_NAME) == label
                and _index_of(p) == (q.k if index is None else index)
            ]
        )
        if pod is None:
            return iter(())
        return self._pod_lines(namespace, pod["metadata"]["name"], q.since, q.until, q.tail)

    def _pod_lines(
        self,
        namespace: str,
        pod: str,
        since: datetime | None,
        until: datetime | None,
        follow: bool,
    ) -> Iterator[str]:
        from torchx_nb.schedulers.logs import LineSplitter

        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False, "timestamps": True}
        if since:
            age = (datetime.now(timezone.utc) - since.astimezone(timezone.utc)).total_seconds()
            kwargs["since_seconds"] = max(int(age), 1)
        resp = call(
            f"cannot read the log of pod {pod}",
            self.kube.core.read_namespaced_pod_log,
            pod,
            namespace,
            **kwargs,
        )
        on_tail_stop(resp.close)
        lines = LineSplitter()
        try:
            for chunk in resp.stream(4096):
                for line in lines.feed(chunk):
                    out = _after_timestamp(line, since, until)
                    if out is not None:
                        yield out
            for line in lines.flush():
                out = _after_timestamp(line, since, until)
                if out is not None:
                    yield out if out.endswith("\n") else LogLine(out + "\n", LogLine.time_of(out))
        except Exception:
            if follow:
                return
            raise
        finally:
            resp.release_conn()
