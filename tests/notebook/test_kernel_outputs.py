"""What a user sees in a real Jupyter kernel (nbclient): every bad ``%torchx`` line renders as
one ``UsageError`` line (never a traceback) and submits nothing; help names ``%torchx``; a job
that ends leaves a static snapshot with its metric chart; commas in --env values survive."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.infra.kernels import execute_in_kernel

pytestmark = pytest.mark.slow

BAD_LINES = [
    ("%torchx", "missing command"),
    ("%torchx frobnicate", "unknown command 'frobnicate'"),
    ("%torchx run", "the following arguments are required: component"),
    ("%torchx run --bogus utils.echo", "unrecognized arguments: --bogus"),
    ("%torchx run utils.echo -s", None),
    ("%torchx run -s", "expected one argument"),
    ("%torchx run utils.echo --nope", "--nope"),
    ("%torchx run utils.nosuch", "nosuch"),
    ("%torchx log", "required: handle"),
    ("%torchx log job -k abc", "invalid int value: 'abc'"),
    ("%torchx log local_cwd://torchx/x --regex '(unclosed'", "regex"),
    ("%torchx status not-a-handle", "not-a-handle"),
    ("%torchx log 'unterminated", "check the quotes"),
    ("%torchx runopts nosuch", "unknown scheduler 'nosuch'"),
    ("%%torchx status\nprint(1)", "only `%%torchx run` and `%%torchx sweep` take a cell body"),
    ("%%torchx run --env NOEQUALS\nprint(1)", "--env expects K=V"),
    ("%%torchx run --env 1A=x\nprint(1)", "not a variable name"),
    ("%%torchx run -o 1bad\nprint(1)", "-o needs a Python variable name, got '1bad'"),
    ("%%torchx run -o class\nprint(1)", "got 'class'"),
    ("%%torchx run -o\nprint(1)", "expected one argument"),
    ("%%torchx run -cfg nonsense\nprint(1)", "KEY=VALUE"),
    ("%%torchx run -cfg log_dir=/tmp,nosuch=1\nprint(1)", "unknown option 'nosuch'"),
    ("%%torchx run -s local_cdw\nprint(1)", "did you mean 'local_cwd'?"),
    ("%%torchx run -j x\nprint(1)", "-j"),
    ("%%torchx run\nx = 1\n%time y = x", "line 2 of the cell, '%time y = x', is an IPython magic"),
    ("%%torchx run\n!nvidia-smi", "line 1 of the cell, '!nvidia-smi', is a shell escape"),
    ("%%torchx run\nfiles = !ls", "line 1 of the cell, 'files = !ls', is a shell escape"),
    ("%%torchx run -h nosuch.size\nprint(1)", "nosuch.size"),
    ("%%torchx run --metric loss\nprint(1)", "--metric expects NAME=REGEX"),
    ("%%torchx run --metric 'loss=(unclosed'\nprint(1)", "bad regular expression"),
    ("%%torchx run --metric 'loss=no group'\nprint(1)", "needs a group"),
    ("%%torchx run --workspace /nonexistent/folder\nprint(1)", "is not a folder"),
    ("%%torchx run --wait --dryrun --bogus\nprint(1)", "unrecognized arguments: --bogus"),
    ("%%torchx run\n   \n", "the cell is empty"),
]


def run(cells: list[str], cwd: Path, allow_errors: bool = True) -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_code_cell(src) for src in cells])
    return execute_in_kernel(nb, cwd, allow_errors=allow_errors)


def plain(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.outputs:
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] == "error":
            parts.append("\n".join(out["traceback"]))
        else:
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


@pytest.mark.parametrize("mode", ["widgets", "text"])
def test_bad_lines_render_as_one_line_and_submit_nothing(
    mode: str, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1" if mode == "widgets" else "text")
    cells = ["%load_ext torchx_nb", *(line for line, _ in BAD_LINES)]
    cells.append("print(len(_ := get_ipython().run_line_magic('torchx', 'list --all')))")
    nb = run(cells, isolated)
    for (line, expected), cell in zip(BAD_LINES, nb.cells[1:-1], strict=True):
        outs = cell.outputs
        # the kernel may send the line and its newline as two stderr messages
        assert outs and all(o["output_type"] == "stream" and o["name"] == "stderr" for o in outs), (
            line,
            outs,
        )
        text = "".join(o["text"] for o in outs)
        assert text.startswith("UsageError: %"), (line, text)
        assert text.endswith("\n") and text.count("\n") == 1, (line, text)
        assert "Traceback" not in text and "----" not in text
        if expected:
            assert expected in text, (line, text)
    assert plain(nb.cells[-1]).strip() == "0"  # nothing was submitted


def test_help_names_the_magic(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    nb = run(
        [
            "%load_ext torchx_nb",
            "%torchx run --help",
            "%%torchx run --help\nprint(1)",
            "%torchx log --help",
            "%torchx runopts --help",
        ],
        isolated,
        allow_errors=False,
    )
    assert plain(nb.cells[1]).startswith("usage: %torchx run ")
    assert plain(nb.cells[2]).startswith("usage: %%torchx run ")
    assert "--metric NAME=REGEX" in plain(nb.cells[2])
    assert plain(nb.cells[3]).startswith("usage: %torchx log ")
    assert plain(nb.cells[4]).startswith("usage: %torchx runopts ")
    for cell in nb.cells[1:]:
        assert "usage: run" not in plain(cell) and "usage: log" not in plain(cell)


def test_commas_in_env_runopts_for_all_and_readable_list(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    nb = run(
        [
            "%load_ext torchx_nb",
            "%%torchx run --wait --env CUDA_VISIBLE_DEVICES=0,1,NCCL_DEBUG=INFO --env X=a,b\n"
            "import os\n"
            "print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['NCCL_DEBUG'], os.environ['X'])",
            "df = %torchx runopts\nprint(sorted(set(df.scheduler)))",
            "df = %torchx list\nprint(df.loc[0, 'state'], df.loc[0, 'duration'], df.loc[0, 'submitted'].tzinfo is not None)",
        ],
        isolated,
        allow_errors=False,
    )
    assert "0,1 INFO a,b\n" in plain(nb.cells[1])
    assert plain(nb.cells[2]) == (
        "['aws_batch', 'aws_sagemaker', 'gcp_batch', 'kubernetes', 'local_cwd', 'local_docker',"
        " 'slurm']\n"
    )
    state, duration, tz = plain(nb.cells[3]).split()
    assert state == "SUCCEEDED" and duration.startswith("0:0") and tz == "True"


def test_a_finished_job_leaves_a_snapshot_with_its_metric_chart(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    nb = run(
        [
            "%load_ext torchx_nb",
            "%%torchx run -o job --metric 'loss=loss: ([0-9.]+)'\n"
            "import time\n"
            "for i in range(6):\n"
            "    print(f'loss: {1 / (i + 1):.3f}', flush=True)\n"
            "    time.sleep(0.2)\n",
            "print(job.wait(interval=0.2).state)",
            "print(job.metrics()[['name', 'step', 'value']].to_string(index=False))",
        ],
        isolated,
        allow_errors=False,
    )
    outputs = nb.cells[1].outputs
    assert [o["output_type"] for o in outputs] == ["display_data", "display_data"], outputs
    status, logs = (o["data"] for o in outputs)
    assert "application/vnd.jupyter.widget-view+json" not in status
    assert 'data-state="SUCCEEDED"' in status["text/html"]
    assert '<div class="torchx-nb-metric" data-metric="loss" data-points="6"' in status["text/html"]
    assert "<polyline" in status["text/html"]
    assert "metrics: loss: 0.167 (6 points)" in status["text/plain"]
    assert "loss: 0.167" in logs["text/html"] and "loss: 1.000" in logs["text/plain"]
    table = plain(nb.cells[3]).split()
    assert table[:3] == ["name", "step", "value"] and table.count("loss") == 6
    assert table[-3:] == ["loss", "5", "0.167"]


def test_wait_returns_after_the_cell_shows_the_end_even_with_a_slow_poller(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``job.wait()`` as the notebook's last cell: the kernel shuts down right after it, so
    the run cell's snapshot must already be in place (the poller here is 60 s behind)."""
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    nb = run(
        [
            "%load_ext torchx_nb\n"
            "from torchx_nb.refresher import get_refresher\n"
            "get_refresher(local_interval=60)",
            "%%torchx run -o job\nimport time\ntime.sleep(1)\nprint('done', flush=True)",
            "print(job.wait(interval=0.2).state)",
        ],
        isolated,
        allow_errors=False,
    )
    assert plain(nb.cells[2]) == "SUCCEEDED\n"
    status, logs = (o["data"] for o in nb.cells[1].outputs)
    assert "application/vnd.jupyter.widget-view+json" not in status
    assert 'data-state="SUCCEEDED"' in status["text/html"]
    assert status["text/plain"].startswith("local_cwd://torchx/")
    assert "done" in logs["text/plain"]


def test_warnings_still_show_after_a_cell_scans_its_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``%%torchx`` dry run scans the notebook's folder for secrets (detect-secrets, whose
    import used to route every warning to a logger with no handler): the secret that ships on
    request is named, and the user's own warnings still show afterwards."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))  # a cold scan cache
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    token = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
    (tmp_path / ".env").write_text(f"GITHUB_TOKEN={token}\n")
    (tmp_path / ".torchxignore").write_text("!.env\n")
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell("%%torchx run -s local_docker --image base:1 --dryrun\nprint(1)"),
            new_code_cell("import warnings\nwarnings.warn('mine, after the scan')"),
        ]
    )
    execute_in_kernel(nb, tmp_path, timeout=120)

    def stderr(cell: nbformat.NotebookNode) -> str:
        return "".join(
            o["text"]
            for o in cell.outputs
            if o.get("output_type") == "stream" and o["name"] == "stderr"
        )

    said = stderr(nb.cells[1])
    assert (
        ".env holds a GitHub Token on line 1 and ships because .torchxignore re-includes it" in said
    )
    assert token not in str(nb.cells[1].outputs)
    assert "UserWarning: mine, after the scan" in stderr(nb.cells[2])


def test_a_failed_cell_shows_its_failure_card_in_the_snapshot_and_in_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The widget's snapshot replaces the plain 'exited with code 1' with the card: the
    replica, what it raised, its exit code, its last lines; --wait ends on the same headline."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    failing = "print('loading', flush=True)\nraise ValueError('boom')"
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext torchx_nb"),
            new_code_cell(f"%%torchx run -o job\n{failing}"),
            new_code_cell("job.wait(timeout=60).state.name"),
            new_code_cell("%config TorchxMagics.widgets = 'text'"),
            new_code_cell(f"%%torchx run --wait\n{failing}"),
        ]
    )
    execute_in_kernel(nb, tmp_path, timeout=120)
    snapshot = [o for o in nb.cells[1].outputs if "text/html" in o.get("data", {})]
    shown = "".join(o["data"]["text/html"] for o in snapshot)
    plain = "".join(o["data"]["text/plain"] for o in snapshot)
    assert "cell/0 raised ValueError: boom (exit code 1)" in shown, shown
    assert "loading" in shown and "exited with code 1" not in shown
    assert "cell/0 raised ValueError: boom (exit code 1)" in plain and "last lines:" in plain
    waited = "".join(o.get("text", "") for o in nb.cells[4].outputs)
    assert "FAILED: cell/0 raised ValueError: boom (exit code 1)" in waited, waited


def test_metrics_read_back_from_a_local_log_have_the_times_lines_were_written(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the live widget, ``job.metrics()`` parses the log after the fact: each point
    has the time the supervisor wrote its line (a line written in two parts: the time it
    began), not NaT and not the time it was read."""
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    nb = run(
        [
            "%load_ext torchx_nb",
            "import time\nbefore = time.time()",
            "%%torchx run -o job --wait --metric 'loss=loss: ([0-9.]+)'\n"
            "import sys, time\n"
            "for i in range(3):\n"
            "    print(f'loss: {1 / (i + 1):.3f}', flush=True)\n"
            "    print('step', i, file=sys.stderr, flush=True)\n"
            "    time.sleep(0.6)\n"
            "print('lo', end='', flush=True)\n"
            "time.sleep(0.6)\n"
            "print('ss: 0.200', flush=True)\n",
            "after = time.time()\n"
            "m = job.metrics()\n"
            "print(m['value'].tolist(), m['time'].isna().sum())\n"
            "t = [x.timestamp() for x in m['time']]\n"
            "print(all(before <= x <= after for x in t))\n"
            "print([round(b - a, 1) >= 0.5 for a, b in zip(t, t[1:])])",
        ],
        isolated,
        allow_errors=False,
    )
    values, within, gaps = plain(nb.cells[3]).splitlines()
    assert values == "[1.0, 0.5, 0.333, 0.2] 0"  # four points, no NaT
    assert within == "True"
    assert gaps == "[True, True, True]"
