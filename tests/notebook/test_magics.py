"""The magics in a real (in-process) IPython shell, in text mode; the widget mode and a real kernel
are covered by test_quickstart.py."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython

from torchx_nb.notebook.handle import JobHandle
from torchx_nb.notebook.magics import MagicLineError, parse_line


@pytest.fixture(scope="module")
def _shell() -> object:
    return start_ipython()


@pytest.fixture
def ip(_shell: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    ip = _shell
    ip.run_line_magic("load_ext", "torchx_nb")  # type: ignore[attr-defined]
    yield ip
    ip.run_line_magic("unload_ext", "torchx_nb")  # type: ignore[attr-defined]
    ip.run_line_magic("config", "TorchxMagics.scheduler = ''")  # type: ignore[attr-defined]


def test_cell_runs_as_a_job_in_the_workspace(
    ip: object, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated / "data.txt").write_text("from the workspace")
    ip.run_cell_magic(  # type: ignore[attr-defined]
        "torchx",
        "run --wait -o job --env GREETING=hello",
        "import os\nprint(os.environ['GREETING'], open('data.txt').read())\n",
    )
    out = capsys.readouterr().out
    job = ip.user_ns["job"]  # type: ignore[attr-defined]
    assert isinstance(job, JobHandle)
    assert "hello from the workspace" in out
    assert f"{job.handle} SUCCEEDED" in out
    assert job.status().state.name == "SUCCEEDED"
    assert job.logs() == "hello from the workspace\n"
    assert "state=SUCCEEDED" in repr(job) and "SUCCEEDED" in job._repr_html_()
    rec = job._runner.jobstore.get(job.handle)
    assert rec.cell_hash and rec.workspace == str(isolated)


def test_distributed_cell_dryrun_shows_torchrun(
    ip: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        ip.run_cell_magic(  # type: ignore[attr-defined]
            "torchx", "run --dryrun -j 2x2 --env API_TOKEN=abc123", "print(1)\n"
        )
    text = cap.stdout + "".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert text.startswith("dry run on local_cwd: nothing built, pushed or submitted\n")
    assert "--no-python python " in text and "abc123" not in text
    assert "/.torchx-nb/cell_main.py" in text and "/.torchx-cell-" in text
    df = ip.run_line_magic("torchx", "list")  # type: ignore[attr-defined]
    assert len(df) == 0
    # a dry run writes nothing: the cell runner's folder does not exist
    runner_path = text.split("/.torchx-nb/cell_main.py")[0].rsplit('"', 1)[-1].split()[-1]
    assert not os.path.exists(runner_path)


def test_line_forms(ip: object, capsys: pytest.CaptureFixture[str]) -> None:
    ip.run_line_magic("torchx", "run -o j1 --wait utils.echo --msg line-form")  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    assert "line-form" in out
    ip.run_line_magic("torchx", "run -o j2 utils.sh -- sleep 30")  # type: ignore[attr-defined]
    ip.run_line_magic("torchx", "status j2")  # type: ignore[attr-defined]
    ip.run_line_magic("torchx", "cancel j2")  # type: ignore[attr-defined]
    assert "cancel requested" in capsys.readouterr().out
    j2 = ip.user_ns["j2"]  # type: ignore[attr-defined]
    assert j2.wait(timeout=20).state.name == "CANCELLED"
    handle = ip.user_ns["j1"].handle  # type: ignore[attr-defined]
    ip.run_line_magic("torchx", f"log {handle} --regex line")  # type: ignore[attr-defined]
    assert capsys.readouterr().out == "line-form\n"
    df = ip.run_line_magic("torchx", "list")  # type: ignore[attr-defined]
    assert list(df.columns) == [
        "handle",
        "scheduler",
        "name",
        "state",
        "submitted",
        "duration",
        "queued",
        "ran",
        "msg",
    ]
    assert set(df["state"]) == {"SUCCEEDED", "CANCELLED"}
    # the msg column shows because the cancelled job says who cancelled it
    by_state = dict(zip(df["state"], df["msg"], strict=True))
    assert by_state["CANCELLED"].startswith("it was cancelled by ")
    assert by_state["SUCCEEDED"] == ""
    assert str(df["submitted"].dtype).startswith("datetime64")
    opts = ip.run_line_magic("torchx", "runopts local_cwd")  # type: ignore[attr-defined]
    assert "log_dir" in set(opts["option"])
    scheds = ip.run_line_magic("torchx", "schedulers")  # type: ignore[attr-defined]
    assert "local_cwd" in set(scheds["scheduler"])


def test_config_traits(ip: object, plugin_path: Path) -> None:
    ip.run_line_magic("config", "TorchxMagics.scheduler = 'needs_queue'")  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="missing required option 'queue'"):
        ip.run_cell_magic("torchx", "run", "print(1)")  # type: ignore[attr-defined]
    ip.run_line_magic("config", "TorchxMagics.cfg = {'needs_queue': {'queue': 'q'}}")  # type: ignore[attr-defined]
    ip.run_cell_magic("torchx", "run -o j", "print(1)")  # type: ignore[attr-defined]
    assert ip.user_ns["j"].handle.startswith("needs_queue://torchx/cell-")  # type: ignore[attr-defined]
    ip.run_line_magic("config", "TorchxMagics.cfg = {}")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("line", "cell", "message"),
    [
        ("run --bogus", "print(1)", "unrecognized arguments: --bogus"),
        ("run -cfg", "print(1)", "expected one argument"),
        ("run -cfg logdir=x", "print(1)", "did you mean 'log_dir'"),
        ("run -cfg novalue", "print(1)", "KEY=VALUE"),
        (  # a byte that is not UTF-8 (as a shell's $'\xff' gives it, through a $variable)
            "run -cfg log_dir=/tmp/\udcff",
            "print(1)",
            "option 'log_dir' holds a byte that is not UTF-8 ('/tmp/\\xff'): give -cfg log_dir=",
        ),
        ("run -s nowhere", "print(1)", "unknown scheduler 'nowhere'"),
        ("run", "   \n", "the cell is empty"),
        ("run --env NOEQUALS", "print(1)", "--env expects K=V"),
        ("run -j 2y2", "print(1)", "bad -j '2y2'"),
        ("run -h gpu.smal", "print(1)", "did you mean 'gpu.small'"),
        ("status", "print(1)", "only `%%torchx run` and `%%torchx sweep` take a cell body"),
        ("sweep", "print(1)", "the following arguments are required: -p/--param"),
        ("sweep -p lr", "print(1)", "-p 'lr': expected NAME=V1,V2"),
        (
            "sweep -p lr=1 --max-parallel 0",
            "print(1)",
            "--max-parallel: expected a whole number of at least 1, got '0'",
        ),
        ("sweep --zip -p a=1,2 -p b=1", "print(1)", "--zip pairs lists of one length"),
        ("sweep -p lr=1 --env lr=2", "print(1)", "-p lr is also set with --env"),
        ("sweep -p lr=1", "  ", "%%torchx sweep: the cell is empty"),
        ("sweep -p lr=1 --workspace none", "lr", "a cell sweep needs a workspace"),
        ("run 'unclosed", "print(1)", "check the quotes"),
        ("run --workspace /does/not/exist", "print(1)", "is not a folder"),
    ],
)
def test_bad_cell_lines_are_one_line_usage_errors(
    ip: object, line: str, cell: str, message: str
) -> None:
    with pytest.raises(UsageError, match=None) as info:
        ip.run_cell_magic("torchx", line, cell)  # type: ignore[attr-defined]
    text = str(info.value)
    assert message in text and "\n" not in text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "missing command"),
        ("stauts x", "did you mean 'status'"),
        ("status not-a-handle", "malformed app handle"),
        ("status local_cwd://torchx/nope-1", "unknown app"),
        ("log", "the following arguments are required: handle"),
        ("run utils.ecko", "did you mean 'utils.echo'"),
        ("sweep -p a=1 utils.echo", "a sweep runs a cell: write `%%torchx sweep"),
        ("result", "the following arguments are required: handle"),
        ("outputs local_cwd://torchx/nope-1", "unknown app"),
    ],
)
def test_bad_line_forms(ip: object, line: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("torchx", line)  # type: ignore[attr-defined]
    assert message in str(info.value)


def test_help_is_complete(ip: object) -> None:
    from IPython.core.oinspect import Inspector

    doc = ip.find_cell_magic("torchx").__doc__  # type: ignore[attr-defined]
    assert "%%torchx run [-s SCHED]" in doc and "%torchx list" in doc
    assert Inspector is not None


def test_loading_imports_no_heavy_modules() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from IPython.testing.globalipapp import start_ipython; ip = start_ipython();"
        " ip.run_line_magic('load_ext', 'torchx_nb');"
        " print([m for m in ('pandas', 'boto3', 'docker', 'google.cloud', 'ipywidgets',"
        " 'kubernetes') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80), st.booleans())
def test_parser_fuzz_never_raises_anything_but_usage_errors(line: str, as_cell: bool) -> None:
    try:
        parse_line(line, "print(1)" if as_cell else None)
    except MagicLineError as e:
        assert "\n" not in str(e).strip() or "see `%torchx?`" in str(e)
    except Exception as e:
        if type(e).__name__ != "HelpShown":
            raise


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "-s",
                "local_cwd",
                "-cfg",
                "a=b",
                "--wait",
                "--dryrun",
                "-j",
                "2x2",
                "-o",
                "v",
                "--env",
                "K=V",
                "-h",
                "cpu.small",
                "--name",
                "x",
                "--image",
                "--workspace",
                "none",
                "--bogus",
                "'",
                '"',
                "=",
                ",",
            ]
        ),
        max_size=12,
    )
)
def test_parser_fuzz_structured(tokens: list[str]) -> None:
    with contextlib.suppress(MagicLineError):
        parse_line("run " + " ".join(tokens), "print(1)")


def test_distributed_cell_runs_under_torchrun(
    ip: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """-j 1x2 really starts two processes under torchrun that form a gloo process group."""
    from tests.conftest import IN_CI

    try:
        import torch  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("torch is not installed (scripts/test installs the CPU wheel)")
        pytest.skip("torch not installed")
    src = (
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.tensor([dist.get_rank() + 1])\n"
        "dist.all_reduce(t)\n"
        "print(f'rank {dist.get_rank()}/{dist.get_world_size()} sum={int(t)}')\n"
        "dist.destroy_process_group()\n"
    )
    ip.run_cell_magic("torchx", "run -j 1x2 --wait -o job", src)  # type: ignore[attr-defined]
    job = ip.user_ns["job"]  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    assert job.status().state.name == "SUCCEEDED", out
    logs = job.logs()
    assert "rank 0/2 sum=3" in logs and "rank 1/2 sum=3" in logs
