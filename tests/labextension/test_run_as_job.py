""" "Run as Job…" in real JupyterLab under Chromium: from the file browser's context menu and
from the notebook's toolbar, a dialog pre-filled from the notebook's parameters cell as the
server's Python parser reads it (a secret-looking one hidden) submits the notebook through
``POST /jobs``, sending only the values the user changed, as typed; the job view follows it,
masks its parameters, and "Open executed notebook" opens the executed copy beside the
original. A refused submission is one line in a dialog, and nothing is submitted."""

from __future__ import annotations

import json
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
        assert shown == 'n=21 api_token="****"', shown  # label was left alone: not sent
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


PARAMETERS_CELL = (
    "n = 1_000  # how many\n"
    "opts = {'depth': 3, 'name': None}\n"
    "shape = (2, 3)\n"
    "half = .5\n"
    "grid = {\n    'lr': [0.1, 0.01],  # two rates\n    'seed': 7,\n}\n"
    "url = 'http://x/#frag'\n"
    "kinds = {1, 2}\n"
    "raw = b'xy'\n"
    "label = None\n"
    "title = 'daily'\n"
)
WRITTEN = {
    "n": "1_000",
    "opts": "{'depth': 3, 'name': None}",
    "shape": "(2, 3)",
    "half": ".5",
    "grid": "{\n    'lr': [0.1, 0.01],  # two rates\n    'seed': 7,\n}",
    "url": "'http://x/#frag'",
    "kinds": "{1, 2}",
    "raw": "b'xy'",
    "label": "None",
    "title": "'daily'",
}
SHOW = "for k in " + repr(list(WRITTEN)) + ":\n    print(k, repr(globals()[k]))"


def test_the_dialog_keeps_every_value_as_written_and_sends_only_what_changed(
    panel_parts: None, tmp_path: Path, isolated: Path
) -> None:
    """The issue's parameters cell: opening the dialog and clicking Run used to give the job
    '1_000', "{'depth'…}", '(2, 3)', '.5', '{' and "'http://x/" as strings. Now every value
    shows as written (the multi-line dict in a text area, with its lines), only the values
    the user changed are sent, exactly as typed, and the job gets them read as -p reads them;
    the others stay the notebook's own. The Options field is sent as typed too and read by
    the CLI's -cfg parser: a value holding ',' and '=' (here a log folder) reaches the job
    whole (the dialog split it itself: 'log_dir="…/logs' and an unknown option 'run')."""
    root = tmp_path / "lab"
    root.mkdir()
    cells = [
        new_code_cell(PARAMETERS_CELL, metadata={"tags": ["parameters"]}),
        new_code_cell(SHOW),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / "sweep.ipynb")
    with jupyter_lab(root) as lab, chromium_page() as page:
        page.goto(f"{lab.url}/lab?token={lab.token}&reset")
        page.wait_for_selector(".jp-LabShell", timeout=60_000)
        open_panel(page)
        command(page, "torchx-nb:run-notebook", "{path: 'sweep.ipynb'}")
        form = dialog_form(page)
        params = form.locator(".tnb-run-param")
        shown = {
            params.nth(i).get_attribute("name"): params.nth(i).input_value()
            for i in range(params.count())
        }
        assert shown == WRITTEN, shown
        assert list(shown) == list(WRITTEN)  # in the cell's order
        grid = form.locator(".tnb-run-param[name='grid']")
        assert grid.evaluate("e => e.tagName") == "TEXTAREA"
        assert form.locator(".tnb-run-params legend").inner_text() == "Parameters"
        assert form.locator(".tnb-run-hint").inner_text() == (
            "Only the values you change are sent, each read as -p reads it: a Python literal,"
            " else text."
        )
        # changed: a tuple, a set, text with its spaces (not a literal), a dict over two lines;
        # n changed and changed back is not a change
        form.locator(".tnb-run-param[name='shape']").fill("(4, 5)")
        form.locator(".tnb-run-param[name='kinds']").fill("{3}")
        form.locator(".tnb-run-param[name='title']").fill(" two words ")
        grid.fill("{'lr': [1e-3],\n 'seed': 8}")
        form.locator(".tnb-run-param[name='n']").fill("2")
        form.locator(".tnb-run-param[name='n']").fill("1_000")
        logs = tmp_path / "logs,run=2"
        options = f'log_dir="{logs}"'
        form.locator(".tnb-run-cfg").fill(options)
        changed = form.locator(".tnb-run-param.tnb-run-changed")
        assert sorted(changed.nth(i).get_attribute("name") or "" for i in range(4)) == [
            "grid",
            "kinds",
            "shape",
            "title",
        ]
        assert changed.count() == 4
        form.locator(".tnb-run-params legend").scroll_into_view_if_needed()
        form.screenshot(path=str(screenshot_dir() / "run-as-job-dialog-values.png"))
        with page.expect_request(
            lambda r: r.method == "POST" and r.url.split("?")[0].endswith("/torchx-nb/api/jobs")
        ) as sent:
            form.locator(".jp-Dialog-button.jp-mod-accept").click()
        body = json.loads(sent.value.post_data or "{}")
        assert body["typed_parameters"] == {
            "shape": "(4, 5)",
            "kinds": "{3}",
            "title": " two words ",
            "grid": "{'lr': [1e-3],\n 'seed': 8}",
        }, body
        assert "parameters" not in body  # no value the user left alone travels
        assert body["typed_cfg"] == options and "cfg" not in body, body

        view = page.locator(".tnb-detail", has=page.locator(".tnb-detail-name", has_text="sweep"))
        view.locator(".tnb-open-executed").wait_for(timeout=90_000)
        assert view.locator(".tnb-badge").first.inner_text() == "SUCCEEDED"
        folder = view.locator(".tnb-fact-log").inner_text()
        assert folder.startswith(f"{logs}/"), folder  # the option as typed, comma and '=' kept
        assert [p for p in logs.rglob("*") if p.is_file()], "the job's logs are in that folder"
        view.locator(".tnb-open-executed").click()
        page.wait_for_selector(".lm-TabBar-tab:has-text('sweep.executed.ipynb')", timeout=30_000)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(o => o.textContent.includes('title'))",
            timeout=30_000,
        )
        page.screenshot(path=str(screenshot_dir() / "run-as-job-values-executed.png"))
    executed = nbformat.read(root / "sweep.executed.ipynb", 4)
    assert executed.cells[1].metadata.tags == ["injected-parameters"]
    assert executed.cells[1].source == (
        "# Parameters\nshape = (4, 5)\ngrid = {'lr': [0.001], 'seed': 8}\nkinds = {3}\n"
        "title = ' two words '\n"
    )  # in the cell's order, each the value -p reads from what was typed
    assert executed.cells[2].outputs[0].text.splitlines() == [
        "n 1000",
        "opts {'depth': 3, 'name': None}",
        "shape (4, 5)",
        "half 0.5",
        "grid {'lr': [0.001], 'seed': 8}",
        "url 'http://x/#frag'",
        "kinds {3}",
        "raw b'xy'",
        "label None",
        "title ' two words '",
    ]
