""" "Run as Job…" in real JupyterLab under Chromium: from the file browser's context menu and
from the notebook's toolbar, a dialog pre-filled from the notebook's parameters cell (a
secret-looking one hidden) submits the notebook through ``POST /jobs``; the job view follows
it, masks its parameters, and "Open executed notebook" opens the executed copy beside the
original. A refused submission is one line in a dialog, and nothing is submitted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.infra.lab import chromium_page, jupyter_lab, screenshot_dir
from tests.labextension.test_panel import open_panel
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow


def command(page: Any, name: str, args: str = "{}") -> None:
    page.evaluate(f"async () => {{ await window.jupyterapp.commands.execute('{name}', {args}); }}")


def dialog_form(page: Any) -> Any:
    page.wait_for_selector(".jp-Dialog .tnb-run-form", timeout=30_000)
    return page.locator(".jp-Dialog")


def test_run_as_job_from_the_file_browser_and_the_toolbar(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    root = tmp_path / "lab"
    reports = root / "reports"
    reports.mkdir(parents=True)
    (reports / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    cells = [
        new_code_cell(
            "n = 1  # how many\nlabel = 'daily'\napi_token = 'placeholder'",
            metadata={"tags": ["parameters"]},
        ),
        new_code_cell("from helper import double\nprint('doubled', double(n), label)"),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, reports / "daily.ipynb")
    with jupyter_lab(root) as lab, chromium_page() as page:
        page.goto(f"{lab.url}/lab?token={lab.token}&reset")
        page.wait_for_selector(".jp-LabShell", timeout=60_000)
        open_panel(page)
        command(page, "filebrowser:go-to-path", "{path: 'reports/'}")
        item = page.locator(".jp-DirListing-item", has_text="daily.ipynb")
        item.wait_for(timeout=30_000)
        item.click(button="right")
        page.locator(".lm-Menu-item", has_text="Run as Job…").click()
        form = dialog_form(page)
        assert form.locator(".tnb-run-path").inner_text() == "reports/daily.ipynb"
        params = form.locator(".tnb-run-param")
        assert [params.nth(i).get_attribute("name") for i in range(3)] == [
            "n",
            "label",
            "api_token",
        ]
        assert params.nth(0).input_value() == "1"  # the comment is not part of the value
        assert params.nth(1).input_value() == "'daily'"
        assert params.nth(2).get_attribute("type") == "password"
        assert form.locator(".tnb-run-scheduler").input_value() == "local_cwd"
        params.nth(0).fill("21")
        params.nth(2).fill("'s3cr3t-value-77'")
        form.screenshot(path=str(screenshot_dir() / "run-as-job-dialog.png"))
        form.locator(".jp-Dialog-button.jp-mod-accept").click()

        view = page.locator(".tnb-detail", has=page.locator(".tnb-detail-name", has_text="daily"))
        view.locator(".tnb-open-executed").wait_for(timeout=90_000)
        assert view.locator(".tnb-badge").first.inner_text() == "SUCCEEDED"
        shown = view.locator(".tnb-fact-parameters").inner_text()
        assert shown == 'n=21 label="daily" api_token="****"', shown
        assert "s3cr3t" not in page.content()
        view.locator(".tnb-open-executed").click()
        page.wait_for_selector(".lm-TabBar-tab:has-text('daily.executed.ipynb')", timeout=30_000)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(o => o.textContent.includes('doubled 42 daily'))",
            timeout=30_000,
        )
        page.screenshot(path=str(screenshot_dir() / "run-as-job-executed.png"))
        assert (reports / "daily.executed.ipynb").is_file()

        # the notebook's own toolbar, and a refusal told in one line with nothing submitted
        command(page, "docmanager:open", "{path: 'reports/daily.ipynb'}")
        button = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tnb-run-as-job")
        button.wait_for(timeout=30_000)
        before = len(get_runner().jobstore.list())
        button.click()
        form = dialog_form(page)
        form.locator(".tnb-run-image").fill("not an image")
        form.locator(".jp-Dialog-button.jp-mod-accept").click()
        refused = page.locator(".jp-Dialog", has_text="The job was not submitted")
        refused.wait_for(timeout=30_000)
        assert "image must be text without spaces or control characters" in refused.inner_text()
        refused.screenshot(path=str(screenshot_dir() / "run-as-job-refused.png"))
        assert len(get_runner().jobstore.list()) == before
