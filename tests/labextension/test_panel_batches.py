"""The panel under a flood of events, in real JupyterLab and Chromium: 2,000 jobs written to the
store at once (another process, an import) arrive as 2,000 ``job`` events; the panel applies
them in batches (one sort and render per frame) and a batch larger than the rows shown is one
reload of the first page, so the list stays one page long and the tab keeps answering."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import stored
from tests.infra.lab import chromium_page, jupyter_lab, screenshot_dir
from tests.labextension.test_panel import open_panel
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow

FLOOD = 2000

# The most rows the list ever had, seen by a MutationObserver in the page.
WATCH_ROWS = """() => {
    window.__most = 0;
    const count = () => {
        window.__most = Math.max(window.__most, document.querySelectorAll('.tnb-job').length);
    };
    new MutationObserver(count).observe(document.body, {subtree: true, childList: true});
    count();
}"""


def flood(store: Path, count: int) -> None:
    """``count`` ended jobs written in one transaction, newer than any shown."""
    db = sqlite3.connect(store)
    now = time.time()
    db.executemany(
        "INSERT INTO jobs (handle, scheduler, session, app_id, name, image, submitted, state,"
        " updated, ended) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (f"local_cwd://torchx/flood-{i}", "local_cwd", "torchx", f"flood-{i}",
             f"flood-{i}", "", now + i / 1000, "SUCCEEDED", now, now + 1)
            for i in range(count)
        ],
    )  # fmt: skip
    db.commit()
    db.close()


def test_a_flood_of_events_keeps_one_page_and_the_tab_answering(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    store = get_runner().jobstore
    for i in range(10):
        store.add(
            stored(
                f"local_cwd://torchx/early-{i}", "local_cwd", f"early-{i}", "SUCCEEDED", 60.0 + i
            )
        )
    with jupyter_lab(tmp_path / "lab") as lab, chromium_page() as page:
        page.goto(f"{lab.url}/lab?token={lab.token}&reset")
        page.wait_for_selector(".jp-LabShell", timeout=60_000)
        panel = open_panel(page)
        page.wait_for_function("document.querySelectorAll('.tnb-job').length === 10")
        panel.locator(".tnb-live-on").wait_for(timeout=60_000)
        page.evaluate(WATCH_ROWS)
        flood(store.path, FLOOD)
        page.wait_for_function(
            f"() => document.querySelector('.tnb-summary').textContent.startsWith('{FLOOD + 10} jobs')",
            timeout=120_000,
        )
        # the page answers at once while (and after) the events arrive
        took: list[float] = []
        for _ in range(10):
            start = time.monotonic()
            assert page.evaluate("1 + 1") == 2
            took.append(time.monotonic() - start)
            time.sleep(0.5)
        assert max(took) < 10, took
        most = page.evaluate("window.__most")
        shown = panel.locator(".tnb-job").count()
        assert most <= 100 and shown <= 100, (most, shown)
        assert panel.locator(".tnb-job .tnb-name").first.inner_text() == f"flood-{FLOOD - 1}"
        panel.screenshot(path=str(screenshot_dir() / "panel-flood.png"), timeout=60_000)
