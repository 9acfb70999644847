"""The panel in Chromium when things go wrong around it: the Jupyter server restarts under it,
its connection drops, a filtered list's rows change state, a search in another alphabet, and
a job deleted while its view is open. Screenshots go to ``test-screenshots/``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shell_app, stored
from tests.infra.lab import chromium_page, jupyter_lab, screenshot_dir
from tests.infra.tcp_relay import tcp_relay
from tests.labextension.test_panel import (
    open_job_view,
    open_lab,
    panel_rows,
    row,
    wait_rows,
)
from torchx_nb.jobstore import JobStore
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow


def watch_event_requests(page: Any) -> list[dict[str, Any]]:
    """Every request the page makes to the event stream, with the last-event-id header it
    sent; answered ones also carry their status."""
    seen: list[dict[str, Any]] = []

    def on_request(request: Any) -> None:
        if "/torchx-nb/api/events" in request.url:
            seen.append({"ids": request.headers.get("last-event-id")})

    def on_response(response: Any) -> None:
        if "/torchx-nb/api/events" in response.url:
            seen.append(
                {"ids": response.request.headers.get("last-event-id"), "status": response.status}
            )

    page.on("request", on_request)
    page.on("response", on_response)
    return seen


def wait_live(page: Any, timeout: float = 60) -> None:
    page.wait_for_function(
        "() => document.querySelector('.tnb-live')?.textContent === 'live'",
        timeout=timeout * 1000,
    )


def test_the_panel_recovers_after_a_server_restart_and_a_dropped_connection(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """The server stops and starts again on the same port: the panel reconnects with the one
    id it last saw, is told to reset, and reloads its list (with a job added while the server
    was down) without a page reload. A connection dropped without a restart (cut in a relay
    between the browser and the server) resumes the same way."""
    import secrets
    import socket

    store = JobStore()
    store.add(stored("local_cwd://torchx/first-1", "local_cwd", "first", "SUCCEEDED", age=30))
    root = tmp_path / "lab"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    token = secrets.token_hex(16)
    with tcp_relay(port) as relay, chromium_page() as page:
        url = f"http://127.0.0.1:{relay.port}"
        events = watch_event_requests(page)
        with jupyter_lab(root, port=port, token=token):
            panel = open_lab(page, url, token)
            wait_rows(page, 1)
            wait_live(page)
        page.wait_for_function(
            "() => document.querySelector('.tnb-live')?.textContent === 'offline'",
            timeout=30_000,
        )
        store.add(stored("local_cwd://torchx/while-down-2", "local_cwd", "while-down", "FAILED", 5))
        before = len(events)
        with jupyter_lab(root, port=port, token=token):
            wait_rows(page, 2, timeout=60)
            wait_live(page)
            assert panel_rows(page) == {
                "local_cwd://torchx/while-down-2": "FAILED",
                "local_cwd://torchx/first-1": "SUCCEEDED",
            }
            panel.screenshot(path=str(screenshot_dir() / "panel-after-restart.png"))
            answered = [e for e in events[before:] if "status" in e]
            assert answered and answered[-1]["status"] == 200, answered
            # each reconnect sent one id, never two joined by a comma
            sent = [e["ids"] for e in events if e["ids"]]
            assert sent and all("," not in ids for ids in sent), sent

            # a plain dropped connection: cut, a job added meanwhile, and it shows
            before = len(events)
            assert relay.cut() > 0
            store.add(
                stored("local_cwd://torchx/dropped-3", "local_cwd", "dropped", "CANCELLED", 1)
            )
            wait_rows(page, 3, timeout=60)
            wait_live(page)
            assert row(page, "dropped").get_attribute("data-state") == "CANCELLED"
            resumed = [e for e in events[before:] if "status" in e]
            assert resumed and all(e["status"] == 200 and e["ids"] for e in resumed), resumed
            assert all("," not in e["ids"] for e in events if e["ids"])


def test_a_filtered_list_keeps_rows_that_change_and_folds_every_alphabet(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """A sweep's list (its id in the search) keeps a trial that is cancelled and takes in a new
    one; a search in another alphabet finds what the server finds, live rows included."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        sw = start(
            runner,
            SweepRequest(
                RunRequest(
                    cell="import time\ntime.sleep(600)\nlr",
                    scheduler="local_cwd",
                    workspace=str(ws),
                ),
                ["lr=0.1,0.2"],
            ),
        )
    store = JobStore()
    store.add(stored("local_cwd://torchx/umlaut-1", "local_cwd", "Überprüfung-Ärger", "FAILED", 9))
    root = tmp_path / "lab"
    root.mkdir()
    try:
        with jupyter_lab(root) as lab, chromium_page() as page:
            panel = open_lab(page, lab.url, lab.token)
            wait_rows(page, 3)
            wait_live(page)
            panel.locator(".tnb-search").fill(sw.id)
            wait_rows(page, 2)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.tnb-job')]"
                ".every(li => li.dataset.state === 'RUNNING')",
                timeout=60_000,
            )
            get_runner().cancel(sw.handles[0])
            page.wait_for_function(
                '(h) => document.querySelector(`.tnb-job[data-handle="${h}"]`)'
                "?.dataset.state === 'CANCELLED'",
                arg=sw.handles[0],
                timeout=30_000,
            )
            time.sleep(2)  # later events must not drop it either
            assert set(panel_rows(page)) == set(sw.handles)
            assert panel.locator(".tnb-summary").inner_text().startswith("2 jobs")
            late = stored("local_cwd://torchx/late-trial", "local_cwd", "late", "SUCCEEDED", 0)
            late.sweep, late.trial = sw.id, 2
            store.add(late)
            wait_rows(page, 3)
            assert late.handle in panel_rows(page)
            panel.screenshot(path=str(screenshot_dir() / "panel-sweep-filter-live.png"))

            panel.locator(".tnb-search").fill("überpr")
            wait_rows(page, 1)
            assert list(panel_rows(page)) == ["local_cwd://torchx/umlaut-1"]
            panel.locator(".tnb-search").fill("ärger")
            wait_rows(page, 1)
            store.add(stored("local_cwd://torchx/umlaut-2", "local_cwd", "ÄRGER-zwei", "FAILED", 0))
            store.add(stored("local_cwd://torchx/plain-2", "local_cwd", "plain", "FAILED", 0))
            wait_rows(page, 2)
            time.sleep(2)
            assert set(panel_rows(page)) == {
                "local_cwd://torchx/umlaut-1",
                "local_cwd://torchx/umlaut-2",
            }
            panel.screenshot(path=str(screenshot_dir() / "panel-search-umlaut.png"))
    finally:
        with get_runner() as runner:
            for handle in sw.handles:
                runner.cancel(handle)


def test_a_deleted_jobs_view_stops_asking_and_says_so(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """A running job's view is open when its record is deleted: the view says the job is
    gone, its Cancel is disabled, and it stops asking the server about it."""
    from torchx_nb.components.cell import cell

    ws = tmp_path / "ws"
    ws.mkdir()
    runner = get_runner()
    handle = runner.run(
        cell(source="import time\nprint('tick', flush=True)\ntime.sleep(600)", name="doomed"),
        "local_cwd",
        {},
        str(ws),
    )
    root = tmp_path / "lab"
    root.mkdir()
    try:
        with jupyter_lab(root) as lab, chromium_page() as page:
            open_lab(page, lab.url, lab.token)
            wait_rows(page, 1)
            view = open_job_view(page, "doomed", "text.includes('tick')")
            asked: list[str] = []
            page.on(
                "request",
                lambda r: asked.append(r.url) if "/torchx-nb/api/jobs/" in r.url else None,
            )
            JobStore().delete(handle)
            view.locator(".tnb-gone").wait_for(timeout=15_000)
            assert view.locator(".tnb-gone").inner_text() == (
                f"{handle} is no longer in the job store (it was deleted);"
                " there is nothing more to show."
            )
            assert view.locator(".tnb-detail-title .tnb-badge").inner_text() == "GONE"
            assert view.locator(".tnb-cancel").is_disabled()
            assert view.locator(".tnb-replicas tr").count() == 0
            assert view.locator(".tnb-follow").inner_text() == "stopped"
            view.screenshot(path=str(screenshot_dir() / "job-view-gone.png"))
            asked.clear()
            time.sleep(6)  # three of the old 2 s polls
            assert asked == [], asked
    finally:
        runner.cancel(handle)


def test_a_failed_jobs_view_shows_its_failure_card(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    from torchx_nb.components.cell import cell

    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        handle = runner.run(
            cell(
                source="print('loading data', flush=True)\nraise ValueError('boom')", name="broke"
            ),
            "local_cwd",
            {},
            str(ws),
        )
        runner.wait(handle, wait_interval=0.1, timeout=60)
    root = tmp_path / "lab"
    root.mkdir()
    with jupyter_lab(root) as lab, chromium_page() as page:
        open_lab(page, lab.url, lab.token)
        wait_rows(page, 1)
        view = open_job_view(page, "broke", "text.includes('boom')")
        view.locator(".tnb-failure").wait_for(timeout=15_000)
        assert view.locator(".tnb-failure-headline").inner_text() == (
            "cell/0 raised ValueError: boom (exit code 1)"
        )
        lines = view.locator(".tnb-failure-lines").inner_text()
        assert lines.startswith("loading data") and lines.endswith("ValueError: boom")
        assert view.locator(".tnb-fact-message").count() == 0  # the card replaces it
        view.screenshot(path=str(screenshot_dir() / "job-view-failure-card.png"))


def test_a_job_end_is_one_notice_and_a_lab_notification(
    panel_parts: None, tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's poller sees a job end: the webhook gets one notice (the submitting
    process watches too, but one claim wins), and the panel puts a notification in Lab's
    notification center whose Open button opens the job's view."""
    from tests.infra.webhook import webhook_receiver
    from torchx_nb import notices

    root = tmp_path / "lab"
    root.mkdir()
    with webhook_receiver() as hook:
        monkeypatch.setenv(notices.NOTIFY_ENV, hook.url)
        with jupyter_lab(root, env={notices.NOTIFY_ENV: hook.url}) as lab, chromium_page() as page:
            open_lab(page, lab.url, lab.token)
            wait_live(page)
            with get_runner() as runner:
                handle = runner.run(
                    shell_app("sleep 2; echo done", name="noticed"), "local_cwd", {}
                )
            toast = page.locator(".Toastify__toast", has_text="noticed SUCCEEDED (local_cwd)")
            toast.wait_for(timeout=30_000)
            page.screenshot(path=str(screenshot_dir() / "panel-job-end-notification.png"))
            toast.get_by_role("button", name="Open").click()
            page.locator(".tnb-detail .tnb-detail-name", has_text="noticed").wait_for(
                timeout=15_000
            )
            deadline = time.monotonic() + 15
            while not hook.posts and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2)  # a second notice would have come by now
            (body,) = hook.bodies()
            assert body["handle"] == handle and body["state"] == "SUCCEEDED"
            assert body["text"].startswith(f"noticed ({handle}) SUCCEEDED after 0:0")


SPY = """
Object.defineProperty(document, 'visibilityState', {
    configurable: true, get: () => (window.__hidden ? 'hidden' : 'visible')});
window.__notes = [];
const Real = window.Notification;
class Spy extends Real {
    constructor(title, options) { super(title, options); window.__notes.push(title); }
}
Object.defineProperty(Spy, 'permission', {get: () => Real.permission});
Spy.requestPermission = (...a) => Real.requestPermission(...a);
window.Notification = Spy;
"""


def test_a_browser_notification_when_the_tab_is_hidden_is_opt_in(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """With the panel's setting on and the permission granted, a job that ends while the tab
    is hidden is also a browser notification; while the tab is shown it is not (the Lab
    notification is enough). The browser's Notification is wrapped to see what is shown."""
    root = tmp_path / "lab"
    root.mkdir()
    with jupyter_lab(root) as lab, chromium_page() as page:
        lab.api(
            "PUT",
            "/lab/api/settings/torchx-nb:plugin",
            {"raw": '{"browserNotifications": true}'},
        )
        page.context.grant_permissions(["notifications"], origin=lab.url)
        page.add_init_script(SPY)
        open_lab(page, lab.url, lab.token)
        wait_live(page)
        page.evaluate("() => { window.__hidden = true; }")
        with get_runner() as runner:
            runner.run(shell_app("sleep 1", name="while-hidden"), "local_cwd", {})
        page.wait_for_function(
            "() => window.__notes.includes('TorchX: while-hidden SUCCEEDED (local_cwd)')",
            timeout=30_000,
        )
        page.evaluate("() => { window.__hidden = false; }")
        with get_runner() as runner:
            runner.run(shell_app("sleep 1", name="while-shown"), "local_cwd", {})
        page.locator(".Toastify__toast", has_text="while-shown SUCCEEDED").wait_for(timeout=30_000)
        assert page.evaluate("() => window.__notes") == [
            "TorchX: while-hidden SUCCEEDED (local_cwd)"
        ]
