"""``POST /torchx-nb/api/jobs`` runs a notebook under the server's root as a job, over the one
submit path, with Jupyter's auth and XSRF; anything that cannot run is a 400 naming the field,
before anything is submitted. ``POST /jobs/{handle}/notebook`` brings the executed notebook
back beside the original, never overwriting a file."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.infra.lab import Lab
from tests.server.api_client import API, conforms, enc, get, request

pytestmark = pytest.mark.slow


def post(lab: Lab, path: str, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(lab.url).netloc, timeout=60)
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request(
        "POST",
        path,
        body=data,
        headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    text = resp.read()
    conn.close()
    return resp.status, json.loads(text) if text else None


def write_notebooks(sub: Path) -> Path:
    """``daily.ipynb`` (a parameters cell, then a cell using ``helper.py``) in ``sub``."""
    sub.mkdir(exist_ok=True)
    (sub / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    cells = [
        new_code_cell("n = 1\napi_token = ''", metadata={"tags": ["parameters"]}),
        new_code_cell("from helper import double\nprint('doubled', double(n))"),
    ]
    nbformat.write(new_notebook(cells=cells), sub / "daily.ipynb")
    return sub


@pytest.fixture
def notebooks(lab: Lab) -> Path:
    return write_notebooks(lab.root / "reports")


def wait_state(lab: Lab, handle: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = get(lab, f"{API}/jobs/{enc(handle)}")
        if job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") or time.monotonic() > deadline:
            return job  # type: ignore[no-any-return]
        time.sleep(0.3)


def test_a_notebook_runs_from_the_api_and_comes_back_beside_it(
    lab: Lab, store: Path, notebooks: Path
) -> None:
    status, row = post(
        lab,
        f"{API}/jobs",
        {
            "notebook": "reports/daily.ipynb",
            "parameters": {"n": 21, "api_token": "s3cr3t-value-99"},
            "scheduler": "local_cwd",
            "cell_timeout": 60,
        },
    )
    assert status == 201, row
    conforms(row, "/torchx-nb/api/jobs", "post", "201")
    assert row["handle"].startswith("local_cwd://") and row["name"] == "daily"
    assert row["notebook_path"] == "reports/daily.ipynb"
    assert row["params"] == {"n": 21, "api_token": "****"}  # masked in every response
    job = wait_state(lab, row["handle"])
    assert job["state"] == "SUCCEEDED", job
    assert "s3cr3t" not in json.dumps(job)
    status, fetched = post(lab, f"{API}/jobs/{enc(row['handle'])}/notebook", None, b"")
    assert status == 201, fetched
    conforms(fetched, "/torchx-nb/api/jobs/{handle}/notebook", "post", "201")
    assert fetched["path"] == "reports/daily.executed.ipynb"
    executed = nbformat.read(lab.root / fetched["path"], 4)
    assert executed.cells[2].outputs[0].text == "doubled 42\n"
    # the executed notebook keeps what it ran with, as the README says
    assert "s3cr3t-value-99" in executed.cells[1].source
    status, again = post(lab, f"{API}/jobs/{enc(row['handle'])}/notebook", None, b"")
    assert status == 201 and again["path"] == "reports/daily.executed-2.ipynb"
    schedulers = get(lab, f"{API}/schedulers")
    assert "local_cwd" in schedulers["schedulers"] and schedulers["default"] == "local_cwd"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({}, "notebook must be the path of a .ipynb file under the server's root"),
        ({"notebook": "../outside.ipynb"}, "notebook must be under the server's root"),
        ({"notebook": "/etc/passwd"}, "notebook must be a path relative to the server's root"),
        ({"notebook": "reports/link.ipynb"}, "notebook must be under the server's root"),
        ({"notebook": "reports/helper.py"}, "notebook must be a .ipynb file"),
        ({"notebook": "reports/none.ipynb"}, "notebook 'reports/none.ipynb' does not exist"),
        ({"notebook": "reports/daily.ipynb", "scheduler": "nope"}, "scheduler 'nope' is not one"),
        ({"notebook": "reports/daily.ipynb", "extra": 1}, "unknown field 'extra': fields are"),
        ({"notebook": "reports/daily.ipynb", "parameters": [1]}, "parameters must be an object"),
        (
            {"notebook": "reports/daily.ipynb", "parameters": {"1x": 1}},
            "parameters.1x: parameters must be an object of NAME",
        ),
        (
            {"notebook": "reports/daily.ipynb", "cfg": {"a": {"b": 1}}},
            "cfg.a: cfg must be an object of option: value, each value text",
        ),
        ({"notebook": "reports/daily.ipynb", "cell_timeout": -1}, "cell_timeout must be a"),
        (  # the field, not the CLI's -p flag
            {"notebook": "reports/daily.ipynb", "parameters": {"class": 1}},
            "parameters.class: a parameter's name must be a Python variable name",
        ),
        ({"notebook": "reports/daily.ipynb", "cell_timeout": True}, "cell_timeout must be a"),
        ({"notebook": "reports/daily.ipynb", "image": "a b"}, "image must be text without"),
        ({"notebook": "reports/daily.ipynb", "cfg": {"nosuch": 1}}, "nosuch"),
        (  # the options as typed, read by the CLI's -cfg parser: its words, the field named
            {"notebook": "reports/daily.ipynb", "typed_cfg": 'log_dir="/tmp/a,b=c'},
            "typed_cfg: cannot parse scheduler options 'log_dir=\"/tmp/a,b=c': unterminated",
        ),
        ({"notebook": "reports/daily.ipynb", "typed_cfg": "a=1\nb=2"}, "typed_cfg must be"),
        (  # sbatch refused it after the build: a 502 where a 400 belongs
            {"notebook": "reports/daily.ipynb", "scheduler": "slurm", "cfg": {"time": "abc"}},
            "slurm option time='abc' is not a Slurm time limit: give minutes (90),",
        ),
        ([1], "the body must be a JSON object"),
        # a lone surrogate ("\\ud800" in the JSON) passed every check and failed after the
        # submit, a 500; a job name's was submitted and never recorded
        (
            {"notebook": "reports/daily.ipynb", "typed_cfg": "log_dir=/tmp/\ud800"},
            "typed_cfg holds a lone surrogate",
        ),
        (
            {"notebook": "reports/daily.ipynb", "parameters": {"x": "a\udfff"}},
            "parameters.x holds a lone surrogate",
        ),
        ({"notebook": "reports/daily.ipynb", "name": "n\ud800"}, "name holds a lone surrogate"),
    ],
)
def test_anything_that_cannot_run_is_a_400_naming_it_and_nothing_is_submitted(
    lab: Lab, store: Path, notebooks: Path, body: Any, reason: str
) -> None:
    outside = lab.root.parent / "outside.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("1")]), outside)
    link = notebooks / "link.ipynb"
    if not link.is_symlink():
        link.symlink_to(outside)
    before = get(lab, f"{API}/jobs")["total"]
    status, answer = post(lab, f"{API}/jobs", body)
    assert status == 400, answer
    assert reason in answer["reason"], answer
    assert get(lab, f"{API}/jobs")["total"] == before


def test_a_body_that_is_not_json_or_too_big_is_a_400(lab: Lab, store: Path) -> None:
    status, answer = post(lab, f"{API}/jobs", None, b"{not json")
    assert status == 400 and answer["reason"] == "the body must be JSON"
    status, answer = post(lab, f"{API}/jobs", None, b" " * (65 * 1024))
    assert status == 400 and answer["reason"] == "the body is over 64 KiB"
    # nesting: too deep for JSON to be read here (it was a 500, RecursionError), or readable
    # but over the limit: a 400 naming the field either way
    for depth in (20_000, 150):
        raw = b'{"notebook": "x.ipynb", "parameters": {"n": 1, "deep": %s%s}}' % (
            b"[" * depth,
            b"]" * depth,
        )
        status, answer = post(lab, f"{API}/jobs", None, raw)
        assert (status, answer["reason"]) == (
            400,
            "parameters.deep nests too deep: at most 100 levels",
        ), answer


def test_submitting_needs_auth_and_xsrf_and_the_same_origin(
    lab: Lab, store: Path, notebooks: Path
) -> None:
    import http.cookiejar

    body = json.dumps({"notebook": "reports/daily.ipynb"}).encode()
    status, _, _ = request(lab, "POST", f"{API}/jobs", token=False)
    assert status == 403
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{lab.url}/lab?token={lab.token}", timeout=30).read()
    xsrf = next(c.value for c in jar if c.name == "_xsrf")

    def send(headers: dict[str, str]) -> int:
        req = urllib.request.Request(
            f"{lab.url}{API}/jobs",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", **headers},
        )
        try:
            return int(opener.open(req, timeout=60).status)
        except urllib.error.HTTPError as e:
            return e.code

    before = get(lab, f"{API}/jobs")["total"]
    assert send({}) == 403  # a cookie without the _xsrf token
    assert send({"X-XSRFToken": xsrf, "Origin": "http://evil.example"}) == 404
    assert get(lab, f"{API}/jobs")["total"] == before
    assert send({"X-XSRFToken": xsrf, "Origin": lab.url}) == 201


def test_a_job_without_an_executed_notebook_is_a_404(lab: Lab, store: Path) -> None:
    from tests.server.api_client import sh
    from torchx_nb.runner import get_runner

    with get_runner() as runner:
        handle = runner.run(sh("plain", "true"), "local_cwd", {})
        runner.wait(handle, wait_interval=0.2, timeout=30)
    status, answer = post(lab, f"{API}/jobs/{enc(handle)}/notebook", None, b"")
    assert status == 404, answer
    assert answer["reason"].startswith("this job has no executed notebook in its outputs")


def test_a_notebook_job_from_python_is_listed_under_its_notebook_and_fetched_beside_it(
    lab: Lab, store: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A job submitted from Python (or the CLI) in the notebook's own folder records the
    notebook's absolute path, so the server rooted above lists it under
    ``weekly/daily.ipynb``, ``?notebook=`` finds it and ``POST /jobs/{h}/notebook`` writes
    beside it; ``job.notebook()`` also fetches beside the original, wherever the caller is.
    The notebook has a folder of its own: the module's server is shared, and another test
    leaves executed copies in ``reports/``."""
    from torchx_nb.notebook.notebook_jobs import run_notebook
    from torchx_nb.runner import get_runner

    notebooks = write_notebooks(lab.root / "weekly")
    monkeypatch.chdir(notebooks)
    with get_runner() as runner:
        job = run_notebook("daily.ipynb", {"n": 2}, scheduler="local_cwd", runner=runner)
        assert job.wait(timeout=120, interval=0.5) is not None
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        assert job.notebook() == notebooks / "daily.executed.ipynb"
    row = get(lab, f"{API}/jobs/{enc(job.handle)}")
    assert row["notebook_path"] == "weekly/daily.ipynb", row
    listed = get(lab, f"{API}/jobs?notebook=weekly%2Fdaily.ipynb")
    assert job.handle in [r["handle"] for r in listed["jobs"]], listed
    status, fetched = post(lab, f"{API}/jobs/{enc(job.handle)}/notebook", None, b"")
    assert status == 201 and fetched["path"] == "weekly/daily.executed-2.ipynb", fetched


PARAMETERS_CELL = (
    "n = 1_000  # how many\n"
    "opts = {'depth': 3, 'name': None}\n"
    "shape = (2, 3)\n"
    "half = .5\n"
    "grid = {\n    'lr': [0.1, 0.01],  # two rates\n    'seed': 7,\n}\n"
    "url = 'http://x/#frag'\n"
    "kinds = {1, 2}\n"
    "raw: bytes = b'xy'\n"
    "label = None\n"
    "a, b = 1, 'two'\n"
)
SHOW = "for k in ('n opts shape half grid url kinds raw label a b').split():\n    print(k, repr(globals()[k]))"


def test_the_parameters_cell_is_served_as_written(lab: Lab, store: Path) -> None:
    """``GET /parameters`` reads the cell with Python's parser: each value's source exactly
    as written (the dialog's old line-by-line reading broke all of these)."""
    sub = lab.root / "params"
    sub.mkdir(exist_ok=True)
    cells = [new_code_cell(PARAMETERS_CELL, metadata={"tags": ["parameters"]})]
    nbformat.write(new_notebook(cells=cells), sub / "p.ipynb")
    answer = get(lab, f"{API}/parameters?notebook=params%2Fp.ipynb")
    conforms(answer, "/torchx-nb/api/parameters")
    assert answer == {
        "notebook": "params/p.ipynb",
        "cell": True,
        "error": None,
        "parameters": [
            {"name": "n", "value": "1_000"},
            {"name": "opts", "value": "{'depth': 3, 'name': None}"},
            {"name": "shape", "value": "(2, 3)"},
            {"name": "half", "value": ".5"},
            {"name": "grid", "value": "{\n    'lr': [0.1, 0.01],  # two rates\n    'seed': 7,\n}"},
            {"name": "url", "value": "'http://x/#frag'"},
            {"name": "kinds", "value": "{1, 2}"},
            {"name": "raw", "value": "b'xy'"},
            {"name": "label", "value": "None"},
            {"name": "a", "value": "1"},
            {"name": "b", "value": "'two'"},
        ],
    }
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), sub / "none.ipynb")
    assert get(lab, f"{API}/parameters?notebook=params%2Fnone.ipynb") == {
        "notebook": "params/none.ipynb",
        "cell": False,
        "parameters": [],
        "error": None,
    }
    bad = [new_code_cell("x = (\n", metadata={"tags": ["parameters"]})]
    nbformat.write(new_notebook(cells=bad), sub / "bad.ipynb")
    answer = get(lab, f"{API}/parameters?notebook=params%2Fbad.ipynb")
    assert (answer["cell"], answer["parameters"]) == (True, [])
    assert answer["error"] == "line 1: '(' was never closed", answer
    (sub / "text.ipynb").write_text("not json")
    hostile = {"cells": [{"cell_type": "code", "metadata": {"tags": 7}, "source": [1]}]}
    (sub / "hostile.ipynb").write_text(json.dumps(hostile))
    assert get(lab, f"{API}/parameters?notebook=params%2Fhostile.ipynb")["cell"] is False
    for query, reason in (
        ("notebook=..%2Fx.ipynb", "notebook must be under the server's root"),
        ("notebook=%2Fetc%2Fpasswd", "notebook must be a path relative to the server's root"),
        ("notebook=params%2Fnope.ipynb", "notebook 'params/nope.ipynb' does not exist"),
        ("notebook=params%2Ftext.ipynb", "notebook 'params/text.ipynb' cannot be read as a"),
        ("", "notebook: give the path of a .ipynb file"),
    ):
        status, _, body = request(lab, "GET", f"{API}/parameters?{query}")
        assert status == 400, (query, body)
        assert json.loads(body)["reason"].startswith(reason), (query, body)


def test_typed_values_are_read_as_p_reads_them_and_the_rest_stay_as_written(
    lab: Lab, store: Path
) -> None:
    """``typed_parameters`` (what the dialog sends: only the values the user changed, as
    typed) are read as ``-p`` reads them; every other value stays as the notebook wrote it."""
    sub = lab.root / "typed"
    sub.mkdir(exist_ok=True)
    cells = [
        new_code_cell(PARAMETERS_CELL, metadata={"tags": ["parameters"]}),
        new_code_cell(SHOW),
    ]
    nbformat.write(new_notebook(cells=cells), sub / "p.ipynb")
    typed = {"shape": "(4, 5)", "b": " two words ", "kinds": "{3}", "label": "b'\\x00'"}
    status, row = post(
        lab,
        f"{API}/jobs",
        {"notebook": "typed/p.ipynb", "typed_parameters": typed, "scheduler": "local_cwd"},
    )
    assert status == 201, row
    assert wait_state(lab, row["handle"])["state"] == "SUCCEEDED"
    status, fetched = post(lab, f"{API}/jobs/{enc(row['handle'])}/notebook", None, b"")
    assert status == 201, fetched
    executed = nbformat.read(lab.root / fetched["path"], 4)
    assert executed.cells[1].metadata.tags == ["injected-parameters"]
    assert executed.cells[1].source == (
        "# Parameters\nshape = (4, 5)\nb = ' two words '\nkinds = {3}\nlabel = b'\\x00'\n"
    )
    assert executed.cells[2].outputs[0].text.splitlines() == [
        "n 1000",
        "opts {'depth': 3, 'name': None}",
        "shape (4, 5)",
        "half 0.5",
        "grid {'lr': [0.1, 0.01], 'seed': 7}",
        "url 'http://x/#frag'",
        "kinds {3}",
        "raw b'xy'",
        "label b'\\x00'",
        "a 1",
        "b ' two words '",
    ]
    for body, reason in (
        (
            {"parameters": {"n": 1}, "typed_parameters": {"n": "2"}},
            "typed_parameters.n: also in parameters; give it once",
        ),
        ({"typed_parameters": {"n": 2}}, "typed_parameters.n: typed_parameters must be an object"),
        (
            {"typed_parameters": {"deep": "[" * 150 + "]" * 150}},
            "typed_parameters.deep nests too deep: at most 100 levels",
        ),
        # a keyword passes the names' pattern; the check after it named parameters.class
        (
            {"typed_parameters": {"class": "1"}},
            "typed_parameters.class: a parameter's name must be a Python variable name",
        ),
        (
            {"parameters": {"class": 1}},
            "parameters.class: a parameter's name must be a Python variable name",
        ),
    ):
        status, answer = post(lab, f"{API}/jobs", {"notebook": "typed/p.ipynb", **body})
        assert (status, answer["reason"][: len(reason)]) == (400, reason), answer
    # an int over Python's 4300 digits was 'the body must be JSON'
    raw = b'{"notebook": "typed/p.ipynb", "parameters": {"n": ' + b"9" * 4400 + b"}}"
    status, answer = post(lab, f"{API}/jobs", None, raw)
    assert (status, answer["reason"]) == (
        400,
        "an integer of 4400 digits is over Python's limit for int text (4300); send it as a"
        " string (typed_parameters reads one as -p does), or compute it in the notebook",
    ), answer
    # parse_constant's own line was lost the same way
    raw = b'{"notebook": "typed/p.ipynb", "parameters": {"n": NaN}}'
    status, answer = post(lab, f"{API}/jobs", None, raw)
    assert (status, answer["reason"]) == (
        400,
        "the body must be JSON (NaN is not a JSON number)",
    ), answer
