"""HTML and text for a job, shared by the live widgets, the static snapshot a finished job
leaves in the notebook, and ``JobHandle``'s reprs. Plain HTML with inline styles that survive
JupyterLab's sanitizer, GitHub and nbviewer; every user-controlled string is escaped."""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from torchx_nb.phases import fmt_duration
from torchx_nb.redact import redact_text
from torchx_nb.specs.api import AppState, AppStatus, display_url, message_text
from torchx_nb.specs.failure import FailureCard

if TYPE_CHECKING:
    from torchx_nb.dryrun_summary import DryRunSummary

STATE_COLOURS = {
    "SUCCEEDED": "#1a7f37",
    "FAILED": "#cf222e",
    "CANCELLED": "#6e7781",
    "RUNNING": "#0969da",
    "PENDING": "#9a6700",
    "SUBMITTED": "#9a6700",
    "UNSUBMITTED": "#9a6700",
    "UNKNOWN": "#6e7781",
}


def fmt_elapsed(seconds: float | None) -> str:
    """``m:ss`` or ``h:mm:ss`` (``0:00`` when unknown)."""
    return fmt_duration(seconds or 0.0)


def elapsed(
    submitted: float | None, status: AppStatus | None, seen_end: float | None = None
) -> float:
    """Seconds from submission to the job's end as the scheduler reports it; for an ended (or
    UNKNOWN) job whose scheduler gives no end time, to ``seen_end`` (when it was first seen
    so); else to now."""
    if submitted is None:
        return 0.0
    end = status.ended if status is not None else None
    stopped = status is not None and (status.is_terminal() or status.state == AppState.UNKNOWN)
    if end is None and stopped:
        end = seen_end  # an UNKNOWN job's clock stops too, when it was seen so
    return max(0.0, (end or time.time()) - submitted)


def state_name(status: AppStatus | None, fallback: str = "SUBMITTED") -> str:
    return status.state.name if status is not None else fallback


def badge(state: str) -> str:
    colour = STATE_COLOURS.get(state, "#6e7781")
    return (
        f'<span class="torchx-nb-state" data-state="{html.escape(state)}" '
        f'style="background:{colour};color:white;border-radius:3px;padding:1px 6px">'
        f"{html.escape(state)}</span>"
    )


def link_html(url: str | None) -> str:
    """A link that opens in the frontend; ``file://`` URLs (a local job's log folder) are shown
    as text, since browsers refuse to open them: the log view has the log."""
    if not url:
        return ""
    if url.startswith("file://"):
        path = html.escape(display_url(url) or "")
        return f"<small>logs: <code>{path}</code> (shown in the log view)</small>"
    safe = html.escape(url, quote=True)
    if not url.startswith(("http://", "https://")):
        return f"<small><code>{safe}</code></small>"
    return f'<small><a href="{safe}" target="_blank" rel="noopener noreferrer">{safe}</a></small>'


def replica_rows(status: AppStatus | None) -> list[tuple[str, int, str, str, str, int]]:
    """(role, replica, state, exit code or message, host, restarts) per replica."""
    if status is None:
        return []
    rows = []
    for rs in status.roles:
        for r in rs.replicas:
            detail = message_text(r.structured_error_msg)
            if r.exit_code is not None:
                detail = f"exit {r.exit_code}" + (f": {detail}" if detail else "")
            rows.append((rs.role, r.id, r.state.name, detail, r.hostname, r.num_restarts))
    return rows


def replica_table_html(status: AppStatus | None) -> str:
    rows = replica_rows(status)
    if not rows:
        return ""
    cell = 'style="padding:1px 8px;text-align:left"'
    head = "".join(
        f"<th {cell}>{h}</th>"
        for h in ("role", "replica", "state", "exit code / message", "host", "restarts")
    )
    body = "".join(
        "<tr>"
        f"<td {cell}>{html.escape(role)}</td><td {cell}>{k}</td>"
        f'<td {cell}><span style="color:{STATE_COLOURS.get(state, "#6e7781")}">{state}</span></td>'
        f"<td {cell}>{html.escape(detail[:300])}</td><td {cell}>{html.escape(host)}</td>"
        f"<td {cell}>{restarts}</td></tr>"
        for role, k, state, detail, host, restarts in rows
    )
    return (
        '<table class="torchx-nb-replicas" style="border-collapse:collapse;font-size:90%;'
        f'margin-top:4px"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def status_header_html(
    handle: str, status: AppStatus | None, seconds: float | None = None, note: str = ""
) -> str:
    """Handle, state badge and (when given) the labelled elapsed time."""
    clock = (
        f' <small class="torchx-nb-elapsed">elapsed {fmt_elapsed(seconds)}</small>'
        if seconds is not None
        else ""
    )
    return f"<code>{html.escape(handle)}</code> {badge(state_name(status))}{clock}{note}"


def status_html(
    handle: str,
    status: AppStatus | None,
    seconds: float | None = None,
    note: str = "",
    failures: Sequence[FailureCard] = (),
) -> str:
    """Header, then the details."""
    return status_header_html(handle, status, seconds, note) + status_details_html(status, failures)


def failures_html(failures: Sequence[FailureCard]) -> str:
    """A card per failing replica: its headline, the next step where there is one, then its
    last lines (masked, as text)."""
    cards = []
    for card in failures:
        tail = (
            f'<pre style="margin:2px 0 4px 1em;font-size:85%">'
            f"{html.escape(redact_text(chr(10).join(card.last_lines)))}</pre>"
            if card.last_lines
            else ""
        )
        step = (
            f"<br><small>next: {html.escape(redact_text(card.next_step))}</small>"
            if card.next_step
            else ""
        )
        cards.append(
            f'<div class="torchx-nb-failure"><b>{html.escape(redact_text(card.headline()))}</b>'
            f"{step}{tail}</div>"
        )
    return "".join(cards)


def failures_text(failures: Sequence[FailureCard]) -> list[str]:
    return [f"  {line}" for card in failures for line in redact_text(card.text()).splitlines()]


def status_details_html(status: AppStatus | None, failures: Sequence[FailureCard] = ()) -> str:
    """Message (or, once a job failed, a card per failing replica), UI link and the
    roles-by-replicas table."""
    if status is None:
        return ""
    parts = []
    msg = message_text(status.msg)
    if failures:
        parts.append(failures_html(failures))
    elif msg:
        parts.append(f"<small>{html.escape(msg[:1000])}</small>")
    link = link_html(status.ui_url)
    if link:
        parts.append(link)
    return "<br>".join(["", *parts]) + replica_table_html(status)


def status_text(
    handle: str,
    status: AppStatus | None,
    seconds: float | None = None,
    failures: Sequence[FailureCard] = (),
) -> str:
    """The plain-text status: handle, state, elapsed time, replicas, message (or the failure
    cards), UI link."""
    head = f"{handle} {state_name(status)}"
    if seconds is not None:
        head += f" (elapsed {fmt_elapsed(seconds)})"
    lines = [head]
    for role, k, state, detail, host, restarts in replica_rows(status):
        extra = f" {detail}" if detail else ""
        extra += f" restarts={restarts}" if restarts else ""
        lines.append(f"  {role}/{k}: {state}{extra}" + (f" on {host}" if host else ""))
    if status is not None:
        if failures:
            lines += failures_text(failures)
        elif message_text(status.msg):
            lines.append(f"  {message_text(status.msg)}")
        if status.ui_url:
            url = status.ui_url
            lines.append(f"  logs: {display_url(url)}" if url.startswith("file://") else f"  {url}")
    return "\n".join(lines)


def notice_html(line: str) -> str:
    """A job-end notice not delivered yet, as one line under the job's status."""
    if not line:
        return ""
    return f'<div style="color:#9a6700"><small>{html.escape(line)}</small></div>'


def result_line(result: str) -> str:
    """``result: REPR`` (or ``raised TYPE: message``), secrets masked, one line."""
    text = redact_text(" ".join(result.split()))[:300]
    return text if text.startswith("raised ") else f"result: {text}"


def phases_html(line: str) -> str:
    """The job's phases under its status (empty when not known)."""
    if not line:
        return ""
    return f'<div class="torchx-nb-phases"><small>{html.escape(line)}</small></div>'


def attempt_chip(attempt: int, preemptions: int) -> str:
    """``preempted \u00d72 · attempt 3`` (a multiplication sign) for a job that ran more than
    once ('' otherwise)."""
    if attempt < 2 and not preemptions:
        return ""
    parts = [f"preempted \u00d7{preemptions}"] if preemptions else []
    return " · ".join([*parts, f"attempt {attempt}"])


def chip_html(chip: str) -> str:
    """The attempt chip beside the state badge (empty for a job that ran once)."""
    if not chip:
        return ""
    return (
        ' <span class="torchx-nb-attempts-chip" style="border:1px solid #9a6700;color:#9a6700;'
        f'border-radius:8px;padding:0 6px;font-size:85%">{html.escape(chip)}</span>'
    )


def attempts_html(lines: Sequence[str]) -> str:
    """The job's attempts under its status: ``Attempts: 3 (2 preemptions, 0 failures)`` and a
    line per preemption (when, why, resumed when, from which checkpoint, the work lost)."""
    if not lines:
        return ""
    head, events = lines[0], [line.strip() for line in lines[1:]]
    items = "".join(f"<li>{html.escape(e)}</li>" for e in events)
    return (
        f'<div class="torchx-nb-attempts"><small>{html.escape(head)}</small>'
        f'<ul class="torchx-nb-preemptions" style="margin:2px 0">{items}</ul></div>'
    )


def result_html(result: str | None) -> str:
    """The result line under the status (empty without a result)."""
    if result is None:
        return ""
    return f'<div class="torchx-nb-result"><code>{html.escape(result_line(result))}</code></div>'


def log_html(lines: Sequence[str], caption: str = "", max_height: str = "320px") -> str:
    """A block of log lines scrolled to the newest, at the bottom (a column-reverse box starts
    at its end; where styles are stripped, all the lines show)."""
    text = html.escape("\n".join(lines))
    cap = f"<small>{html.escape(caption)}</small>" if caption else ""
    return (
        f"{cap}<div style='display:flex;flex-direction:column-reverse;max-height:{max_height};"
        f"overflow:auto'><pre class='torchx-nb-log' style='margin:0;flex:none'>{text}</pre></div>"
    )


def metrics_svg(
    series: dict[str, list[tuple[int, float]]], width: int = 360, height: int = 190
) -> str:
    """One line chart per metric (its name, last value and min/max above it), with labelled
    axes, in the theme's colours (``charts.line_chart``)."""
    from torchx_nb.notebook.charts import line_chart

    charts = []
    for name, points in series.items():
        label = html.escape(name)
        if not points:
            charts.append(
                f'<div class="torchx-nb-metric" data-metric="{label}" style="display:inline-block;'
                f'margin-right:12px"><small>{label}: no points yet</small></div>'
            )
            continue
        ys = [p[1] for p in points]
        chart = line_chart({name: [(float(x), y) for x, y in points]}, name, "step", width, height)
        charts.append(
            f'<div class="torchx-nb-metric" data-metric="{label}" data-points="{len(points)}"'
            f' style="display:inline-block;margin-right:12px;vertical-align:top">'
            f"<small>{label}: <b>{ys[-1]:.6g}</b> (min {min(ys):.4g}, max {max(ys):.4g}, "
            f"{len(points)} points)</small><br>{chart}</div>"
        )
    return "".join(charts)


def metrics_text(series: dict[str, list[tuple[int, float]]]) -> str:
    parts = [
        f"{name}: {points[-1][1]:.6g} ({len(points)} points)" if points else f"{name}: no points"
        for name, points in series.items()
    ]
    return "  metrics: " + "; ".join(parts) if parts else ""


def sweep_table_html(
    points: Sequence[Mapping[str, object]],
    handles: Sequence[str | None],
    statuses: Sequence[AppStatus | None],
    extra: Sequence[dict[str, str]] | None = None,
) -> str:
    """A row per trial: its parameters, a state badge, then ``extra`` columns (elapsed,
    metrics, result), every value escaped."""
    from torchx_nb.sweeps import sweep_rows

    rows = sweep_rows(points, handles, statuses)
    names = list(points[0]) if points else []
    more = list(extra[0]) if extra else []
    cell = 'style="padding:2px 8px;text-align:left"'
    head = "".join(f"<th {cell}>{html.escape(h)}</th>" for h in ["trial", *names, "state", *more])
    body = []
    for (i, p, state, handle), ext in zip(rows, extra or [{}] * len(rows), strict=True):
        tds = [f"<td {cell}>{i}</td>"]
        tds += [f"<td {cell}><code>{html.escape(str(p[n]))}</code></td>" for n in names]
        tds.append(f'<td {cell} title="{html.escape(handle or "")}">{badge(state)}</td>')
        tds += [f"<td {cell}>{html.escape(ext.get(m, ''))}</td>" for m in more]
        body.append(f'<tr data-trial="{i}" data-state="{state}">{"".join(tds)}</tr>')
    return (
        '<table class="torchx-nb-sweep" style="border-collapse:collapse;font-size:90%">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def dryrun_html(summary: DryRunSummary) -> str:
    """A dry run as HTML: the summary, then the whole request and the workspace's files in
    collapsed sections (``<details>``, which needs no script and survives a saved notebook)."""
    parts = [f"<pre>{html.escape(summary.text())}</pre>"]
    size = len(summary.request.encode())
    parts.append(
        f"<details><summary>the whole request ({size / 1024:.1f} KB)</summary>"
        f"<pre>{html.escape(summary.request)}</pre></details>"
    )
    if summary.ships:
        parts.append(
            "<details><summary>what ships</summary>"
            f"<pre>{html.escape(summary.ships)}</pre></details>"
        )
    if summary.environment:
        parts.append(
            "<details><summary>the environment plan</summary>"
            f"<pre>{html.escape(summary.environment)}</pre></details>"
        )
    return '<div class="torchx-nb-dryrun">' + "".join(parts) + "</div>"
