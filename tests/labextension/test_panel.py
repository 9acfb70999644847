"""The JupyterLab panel as a user sees it: real JupyterLab 4 (and Notebook 7) with torchx_nb's
server and lab extensions, in Debian's headless Chromium driven by Playwright.

A notebook runs a short job and a long one; the panel shows both appear and change state by
themselves, the status bar counts the running one, the job view follows its log as text (markup
in a log stays text), Cancel asks first and then cancels, the notebook link opens the notebook,
``%torchx list`` and the panel agree, and after a reload everything is still there. Screenshots
go to ``test-screenshots/`` (``$TORCHX_NB_SCREENSHOTS``); the README shows some of them."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import stored
from tests.infra.lab import (
    NotebookPage,
    chromium_page,
    jupyter_lab,
    screenshot_dir,
    write_notebook,
)
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow

SHORT_JOB = (
    "%%torchx run -o short --name short-job\n"
    "import time\n"
    "for i in range(3):\n"
    "    print(f'short step {i}', flush=True)\n"
    "    time.sleep(1)\n"
)
LONG_JOB = (
    "%%torchx run -o long --name long-job\n"
    "import time\n"
    "print('<b>bold?</b><img src=x onerror=\"window.__pwned=1\">', flush=True)\n"
    "for i in range(600):\n"
    "    print(f'long step {i}', flush=True)\n"
    "    time.sleep(0.5)\n"
)
LIST_CELL = "%torchx list"

# When each job's row first showed each state (ms), seen by a MutationObserver in the page.
OBSERVER = """() => {
    window.__rows = {};
    const seen = () => document.querySelectorAll('.tnb-job').forEach(li => {
        const key = li.querySelector('.tnb-name').textContent + ':' + li.dataset.state;
        if (!(key in window.__rows)) window.__rows[key] = Date.now();
    });
    new MutationObserver(seen).observe(document.body,
        {subtree: true, childList: true, attributes: true, attributeFilter: ['data-state']});
    seen();
}"""


def open_panel(page: Any) -> Any:
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('torchx-nb:open-panel'); }"
    )
    page.wait_for_selector(".tnb-panel .tnb-summary", timeout=30_000)
    return page.locator(".tnb-panel")


def open_lab(page: Any, url: str, token: str) -> Any:
    """JupyterLab at ``url`` in a fresh layout, with the panel open."""
    page.goto(f"{url}/lab?token={token}&reset")
    page.wait_for_selector(".jp-LabShell", timeout=60_000)
    return open_panel(page)


def open_job_view(page: Any, name: str, log_test: str) -> Any:
    """A click on the job's row; waits until its view's log passes ``log_test`` (a JS
    expression over ``text``)."""
    row(page, name).locator(".tnb-name").click()
    page.wait_for_function(
        f"() => {{ const text = document.querySelector('.tnb-detail .tnb-log')?.textContent;"
        f" return text !== undefined && ({log_test}); }}",
        timeout=60_000,
    )
    return page.locator(".tnb-detail")


def row(page: Any, name: str) -> Any:
    return page.locator(".tnb-job", has=page.locator(".tnb-name", has_text=re.compile(f"^{name}$")))


def wait_state(page: Any, name: str, state: str, timeout: float = 60) -> None:
    page.wait_for_function(
        "([name, state]) => window.__rows && ((name + ':' + state) in window.__rows)",
        arg=[name, state],
        timeout=timeout * 1000,
    )


def wait_rows(page: Any, n: int, timeout: float = 30) -> None:
    """Until the panel lists ``n`` jobs; else fail with what it shows (its summary line says
    why a list did not come)."""
    try:
        page.wait_for_function(
            "(n) => document.querySelectorAll('.tnb-job').length === n",
            arg=n,
            timeout=timeout * 1000,
        )
    except Exception:
        summary = page.locator(".tnb-summary").first.inner_text()
        shown = page.locator(".tnb-job .tnb-name").all_inner_texts()
        page.screenshot(path=str(screenshot_dir() / "panel-wait-rows-failed.png"))
        pytest.fail(f"the panel did not list {n} jobs in {timeout:g} s: {summary!r}, {shown}")


def panel_rows(page: Any) -> dict[str, str]:
    rows = page.evaluate(
        "() => [...document.querySelectorAll('.tnb-job')].map(li => [li.dataset.handle, "
        "li.dataset.state])"
    )
    return dict(rows)


def test_panel_live_logs_cancel_notebook_link_and_reload(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    root = tmp_path / "lab"
    root.mkdir()
    write_notebook(root / "train.ipynb", ["%load_ext torchx_nb", SHORT_JOB, LONG_JOB, LIST_CELL])
    with jupyter_lab(root, env={"TORCHX_NB_WIDGETS": "auto"}) as lab, chromium_page() as page:
        nb = NotebookPage(page, lab, "train.ipynb").open()
        panel = open_panel(page)
        page.evaluate(OBSERVER)
        page.wait_for_function(
            "() => document.querySelector('.tnb-empty')"
            " || document.querySelector('.tnb-summary.tnb-error')",
            timeout=60_000,
        )
        summary = panel.locator(".tnb-summary").inner_text()
        assert panel.locator(".tnb-empty").count() == 1, summary
        assert panel.locator(".tnb-empty").inner_text().startswith("No jobs yet")
        nb.run_all()

        # Both jobs appear by themselves, and the short one goes on to SUCCEEDED: no reload.
        wait_state(page, "long-job", "RUNNING")
        wait_state(page, "short-job", "SUCCEEDED")
        first = page.evaluate("() => Object.keys(window.__rows)")
        assert any(k.startswith("short-job:") and not k.endswith("SUCCEEDED") for k in first), first
        assert page.locator(".tnb-status").inner_text() == "TorchX: 1 running"
        long_row = row(page, "long-job")
        assert long_row.locator(".tnb-badge").inner_text() == "RUNNING"
        assert long_row.locator(".tnb-scheduler").inner_text() == "local_cwd"
        assert long_row.locator(".tnb-notebook").inner_text() == "train.ipynb"
        panel.screenshot(path=str(screenshot_dir() / "panel-running.png"))
        page.screenshot(path=str(screenshot_dir() / "panel-with-notebook.png"))

        # The job view: replicas, and a log that follows the tail, markup kept as text.
        long_row.locator(".tnb-name").click()
        view = page.locator(".tnb-detail")
        view.locator(".tnb-replicas tr").nth(1).wait_for(timeout=30_000)
        replica = view.locator(".tnb-replicas tr").nth(1).locator("td").all_inner_texts()
        assert replica[1:4] == ["0", "RUNNING", "localhost"], replica
        log = view.locator(".tnb-log")
        page.wait_for_function(
            "() => /long step [3-9]/.test(document.querySelector('.tnb-log').textContent)",
            timeout=30_000,
        )
        first_text = log.inner_text()
        page.wait_for_function(
            "(n) => document.querySelector('.tnb-log').textContent.length > n",
            arg=len(first_text),
            timeout=15_000,
        )
        assert '<b>bold?</b><img src=x onerror="window.__pwned=1">' in log.inner_text()
        assert log.locator("b, img").count() == 0
        assert page.evaluate("() => window.__pwned") is None
        assert view.locator(".tnb-follow").inner_text() == "following"
        page.screenshot(path=str(screenshot_dir() / "panel-job-logs.png"))

        # Cancel asks first; "Keep running" keeps it running.
        cancel = long_row.locator(".tnb-cancel")
        cancel.click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=10_000)
        assert "long-job" in dialog.locator(".jp-Dialog-body").inner_text()
        page.screenshot(path=str(screenshot_dir() / "panel-cancel-confirm.png"))
        page.keyboard.press("Enter")  # the default button is the safe one
        dialog.wait_for(state="detached", timeout=10_000)
        time.sleep(2)
        assert long_row.get_attribute("data-state") == "RUNNING"
        cancel.click()
        dialog.get_by_role("button", name="Keep running").click()
        time.sleep(2)
        assert long_row.get_attribute("data-state") == "RUNNING"
        cancel.click()
        page.locator(".jp-Dialog").get_by_role("button", name="Cancel job").click()
        wait_state(page, "long-job", "CANCELLED", timeout=30)
        page.wait_for_function(
            "() => document.querySelector('.tnb-follow').textContent === 'ended'", timeout=15_000
        )
        assert view.locator(".tnb-detail-title .tnb-badge").inner_text() == "CANCELLED"
        assert view.locator(".tnb-cancel").is_disabled()
        assert page.locator(".tnb-status").inner_text() == "TorchX: 0 running"

        # The store agrees: the job the panel cancelled is CANCELLED for every client.
        handles = panel_rows(page)
        assert sorted(handles.values()) == ["CANCELLED", "SUCCEEDED"]
        store = {r.handle: r.state for r in get_runner().jobstore.list()}
        assert store == handles

        # The notebook link opens the submitting notebook.
        row(page, "short-job").locator(".tnb-notebook").click()
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.context"
            " && window.jupyterapp.shell.currentWidget.context.path === 'train.ipynb'",
            timeout=15_000,
        )

        # %torchx list, run in the notebook, shows the same jobs in the same states.
        nb.run_cell(3)
        listing = nb.outputs(3)
        listing.locator("table").first.wait_for(timeout=60_000)
        table = listing.locator("table").first.inner_text()
        for handle, state in handles.items():
            line = next(ln for ln in table.splitlines() if handle in ln)
            assert state in line, (handle, state, line)

        # A reload finds everything still there: the rows, their states, the open job view.
        row(page, "long-job").locator(".tnb-name").click()
        time.sleep(1)
        page.reload()
        page.wait_for_selector(".tnb-job", timeout=60_000)
        page.evaluate(OBSERVER)
        assert panel_rows(page) == handles
        page.wait_for_selector(".tnb-detail .tnb-detail-name", timeout=30_000)
        assert page.locator(".tnb-detail .tnb-detail-name").first.inner_text() == "long-job"
        page.screenshot(path=str(screenshot_dir() / "panel-after-reload.png"))


def test_filters_search_and_empty_match(panel_parts: None, tmp_path: Path, isolated: Path) -> None:
    """Filters and search run on the server; the scheduler menu offers what the store holds."""
    store = get_runner().jobstore
    jobs = [
        ("local_cwd://torchx/prep-a1", "local_cwd", "prep", "SUCCEEDED"),
        ("slurm://torchx/4242", "slurm", "train-big", "FAILED"),
        ("kubernetes://torchx/default:eval-x9", "kubernetes", "eval", "SUCCEEDED"),
        ("aws_batch://torchx/q:<script>alert(1)</script>", "aws_batch", "xss<b>", "CANCELLED"),
    ]
    for i, (handle, sched, name, state) in enumerate(jobs):
        store.add(stored(handle, sched, name, state, age=60.0 * (len(jobs) - i)))
    root = tmp_path / "lab"
    with jupyter_lab(root) as lab, chromium_page() as page:
        page.goto(f"{lab.url}/lab?token={lab.token}&reset")
        page.wait_for_selector(".jp-LabShell", timeout=60_000)
        panel = open_panel(page)
        page.wait_for_selector(".tnb-job", timeout=30_000)
        names = lambda: [n.inner_text() for n in panel.locator(".tnb-job .tnb-name").all()]  # noqa: E731
        assert names() == ["xss<b>", "eval", "train-big", "prep"]
        assert panel.locator(".tnb-summary").inner_text() == "4 jobs · 0 running"
        options = panel.locator(".tnb-filter-scheduler option").all_inner_texts()
        assert options == ["any scheduler", "aws_batch", "kubernetes", "local_cwd", "slurm"]

        panel.locator(".tnb-filter-scheduler").select_option("slurm")
        wait_rows(page, 1)
        assert names() == ["train-big"]
        panel.locator(".tnb-filter-scheduler").select_option("")
        panel.locator(".tnb-filter-state").select_option("SUCCEEDED")
        wait_rows(page, 2)
        assert names() == ["eval", "prep"]
        panel.locator(".tnb-search").fill("PREP")
        wait_rows(page, 1)
        assert names() == ["prep"]
        panel.locator(".tnb-search").fill("nothing-like-this")
        panel.locator(".tnb-empty").wait_for(timeout=10_000)
        assert panel.locator(".tnb-empty").inner_text() == "No job matches."
        panel.locator(".tnb-search").fill("")
        panel.locator(".tnb-filter-state").select_option("")
        wait_rows(page, 4)
        assert panel.locator(".tnb-job b, .tnb-job script").count() == 0
        panel.screenshot(path=str(screenshot_dir() / "panel-filters.png"))


def test_a_job_list_the_server_could_not_give_comes_by_itself(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """The job store is unusable when the panel opens: the panel says why, then lists the jobs
    once the store is back, with no reload."""
    store = get_runner().jobstore
    store.add(stored("local_cwd://torchx/back-1", "local_cwd", "came-back", "SUCCEEDED", age=5))
    files = [store.path.with_name(store.path.name + sfx) for sfx in ("", "-wal", "-shm")]
    for f in files:
        if f.exists():
            f.rename(f.with_name(f.name + ".aside"))
    store.path.write_bytes(b"not a database, " * 512)
    store.path.chmod(0o600)

    def put_back() -> None:
        store.path.unlink()
        for f in files:
            aside = f.with_name(f.name + ".aside")
            if aside.exists():
                aside.rename(f)

    root = tmp_path / "lab"
    with jupyter_lab(root) as lab, chromium_page() as page:
        try:
            page.goto(f"{lab.url}/lab?token={lab.token}&reset")
            page.wait_for_selector(".jp-LabShell", timeout=60_000)
            panel = open_panel(page)
            page.wait_for_selector(".tnb-summary.tnb-error", timeout=30_000)
            said = panel.locator(".tnb-summary").inner_text()
            assert said.startswith("Cannot list jobs: cannot use the job store"), said
            assert "file is not a database; move it aside" in said
        finally:
            put_back()
        wait_rows(page, 1)
        assert panel.locator(".tnb-job .tnb-name").inner_text() == "came-back"
        assert panel.locator(".tnb-summary").inner_text() == "1 job · 0 running"


def test_panel_works_in_notebook_7(panel_parts: None, tmp_path: Path, isolated: Path) -> None:
    """Notebook 7 loads the same extension: the panel opens beside a notebook and lists jobs."""
    store = get_runner().jobstore
    store.add(stored("local_cwd://torchx/nb7-job", "local_cwd", "nb7-job", "SUCCEEDED", age=5))
    root = tmp_path / "nb7"
    root.mkdir()
    write_notebook(root / "seven.ipynb", ["print(1)"])
    with jupyter_lab(root, app="notebook") as lab, chromium_page() as page:
        page.goto(f"{lab.url}/notebooks/seven.ipynb?token={lab.token}")
        page.wait_for_selector(".jp-Notebook", timeout=60_000)
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.commands.hasCommand('torchx-nb:open-panel')",
            timeout=30_000,
        )
        open_panel(page)
        page.wait_for_selector(".tnb-job", timeout=30_000)
        assert page.locator(".tnb-job .tnb-name").inner_text() == "nb7-job"
        page.screenshot(path=str(screenshot_dir() / "panel-notebook7.png"))
        page.locator(".tnb-job .tnb-name").click()
        page.wait_for_selector(".tnb-detail .tnb-detail-name", timeout=30_000)
        assert page.locator(".tnb-detail .tnb-fact-handle").inner_text() == (
            "local_cwd://torchx/nb7-job"
        )
        page.screenshot(path=str(screenshot_dir() / "panel-notebook7-job.png"))


def test_job_view_result_outputs_download_and_first_seconds(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """An ended cell job's view shows its result and its output files, one of which downloads
    through the browser; a running job with no output yet says so; a local_cwd job shows no
    image; the header says connecting… until the event stream opens; the filter menus show
    their whole text at the panel's default width."""
    from tests.result_checks import RESULT_CELL, result_workspace
    from torchx_nb.components.cell import cell

    ws = result_workspace(tmp_path)
    with get_runner() as runner:
        done = runner.run(cell(source=RESULT_CELL, name="scored"), "local_cwd", {}, str(ws))
        assert runner.wait(done, wait_interval=0.2).state.name == "SUCCEEDED"  # type: ignore[union-attr]
        quiet = runner.run(
            cell(source="import time\ntime.sleep(600)", name="quiet"), "local_cwd", {}, str(ws)
        )
    root = tmp_path / "lab"
    root.mkdir()
    with jupyter_lab(root) as lab, chromium_page() as page:
        held: list[Any] = []
        page.route("**/torchx-nb/api/events**", lambda route: held.append(route))
        page.goto(f"{lab.url}/lab?token={lab.token}&reset")
        page.wait_for_selector(".jp-LabShell", timeout=60_000)
        panel = open_panel(page)
        page.wait_for_selector(".tnb-job", timeout=30_000)
        assert panel.locator(".tnb-live").inner_text() == "connecting…"
        for route in held:
            route.continue_()
        page.unroute("**/torchx-nb/api/events**")
        page.wait_for_function(
            "() => document.querySelector('.tnb-live').textContent === 'live'", timeout=30_000
        )
        # every filter menu is at least as wide as its longest choice
        clipped = page.evaluate(
            """() => [...document.querySelectorAll('.tnb-filters select')].filter(s => {
                const ctx = document.createElement('canvas').getContext('2d');
                ctx.font = getComputedStyle(s).font;
                const widest = Math.max(...[...s.options].map(o => ctx.measureText(o.text).width));
                return widest + 24 > s.clientWidth;
            }).map(s => s.className)"""
        )
        assert clipped == [], clipped
        panel.screenshot(path=str(screenshot_dir() / "panel-default-width.png"))

        view = open_job_view(page, "quiet", "text === '(no output yet)'")
        box = view.locator(".tnb-log").bounding_box()
        assert box is not None and box["height"] < 60, box  # one line, not a tall empty box
        assert view.locator(".tnb-fact-image").count() == 0
        runner = get_runner()
        runner.cancel(quiet)

        row(page, "scored").locator(".tnb-name").click()
        scored = page.locator(
            ".tnb-detail", has=page.locator(".tnb-detail-name", has_text="scored")
        )
        scored.locator(".tnb-result-repr").wait_for(timeout=30_000)
        assert scored.locator(".tnb-result-repr").inner_text() == "Score(acc=0.9, rank=0)"
        links = scored.locator(".tnb-output-link")
        assert links.all_inner_texts() == ["ckpt/weights.bin", "metrics.json"]
        assert scored.locator(".tnb-output-size").all_inner_texts() == ["16.4 kB", "12 B"]
        assert scored.locator(".tnb-fact-image").count() == 0
        page.screenshot(path=str(screenshot_dir() / "panel-job-result.png"))
        with page.expect_download() as download:
            links.first.click()
        saved = tmp_path / "downloaded.bin"
        download.value.save_as(saved)
        assert download.value.suggested_filename == "weights.bin"
        assert saved.read_bytes() == bytes(range(256)) * 64


def test_a_sweeps_trials_are_grouped_in_the_panel(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """Each trial's row names its sweep and parameters; a click on the sweep shows its trials
    only (the search matches the sweep's id on the server)."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    with get_runner() as runner:
        other = runner.run(runner.component_app("utils.echo", {"msg": "alone"}), "local_cwd", {})
        sw = start(
            runner,
            SweepRequest(
                RunRequest(cell="lr * depth", scheduler="local_cwd", workspace=str(tmp_path)),
                ["lr=0.1,0.2", "depth=3"],
            ),
        )
        sw.wait(timeout=60)
    root = tmp_path / "lab"
    root.mkdir()
    with jupyter_lab(root) as lab, chromium_page() as page:
        page.goto(f"{lab.url}/lab?token={lab.token}&reset")
        page.wait_for_selector(".jp-LabShell", timeout=60_000)
        panel = open_panel(page)
        wait_rows(page, 3)
        chips = panel.locator(".tnb-trial")
        assert sorted(chips.all_inner_texts()) == [
            f"{sw.id} #0\nlr=0.1 depth=3",
            f"{sw.id} #1\nlr=0.2 depth=3",
        ]
        chips.first.locator(".tnb-sweep").click()
        wait_rows(page, 2)
        assert panel.locator(".tnb-search").input_value() == sw.id
        shown = {li.get_attribute("data-handle") for li in panel.locator(".tnb-job").all()}
        assert shown == set(sw.handles) and other not in shown
        panel.screenshot(path=str(screenshot_dir() / "panel-sweep.png"))
