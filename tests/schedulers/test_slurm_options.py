"""Slurm options a dry run can check, checked there: a ``time`` sbatch would refuse and a
memory size its ``--mem`` cannot take are one line naming the fix, in the CLI, the notebook
and the REST API, before anything is built or submitted (``-cfg time=abc`` passed the dry run
and sbatch refused it after the build). The checker agrees with the real sbatch."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.conftest import cli
from tests.infra.slurm import SlurmCluster
from tests.notebook.test_quickstart import execute, text_of
from torchx_nb import specs
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.slurm.options import check_time, memory_mb

TIME_LINE = (
    "slurm option time='abc' is not a Slurm time limit: give minutes (90), hours:minutes:seconds"
    " (1:30:00), days-hours[:minutes[:seconds]] (2-12, 1-12:30:00) or UNLIMITED"
)
TAKEN = ["10", "0", "90:30", "1:30:00", "1:70:00", "2-0", "2-12", "1-12:30", "1-12:30:15"]
TAKEN += ["INFINITE", "unlimited", "Unlimited", "00:00:01", "0-0:0:0"]
REFUSED = ["abc", "1:2:3:4", "1.5", "10m", " 10", "1-2-3", "30:", ":30", "1:30:00.5", "1h"]


def ours(value: str) -> bool:
    try:
        check_time(value)
    except ValueError:
        return False
    return True


def test_the_time_check_agrees_with_sbatch(slurm_env: SlurmCluster) -> None:
    """Each form sbatch takes is taken, each it refuses is refused (``sbatch --test-only``
    validates without submitting); whole MB for ``--mem``, as sbatch wants them."""
    for value in TAKEN + REFUSED:
        got = slurm_env.run("sbatch", "--test-only", f"--time={value}", "--wrap=true", check=False)
        assert ours(value) == (got.returncode == 0), (value, got.stderr)
    # undocumented spellings sbatch lets through are refused here, naming the documented ones
    for odd in ("-1", "1-", "-5"):
        assert not ours(odd)
    assert memory_mb("a", 1536.0) == 1536 and memory_mb("a", 512) == 512
    for mem in (1536.5, "4G", True, None):
        with pytest.raises(ValueError, match="is not a whole number of MB"):
            memory_mb("a", mem)
    took = slurm_env.run("sbatch", "--test-only", "--mem=512", "--wrap=true", check=False)
    refused = slurm_env.run("sbatch", "--test-only", "--mem=512.5", "--wrap=true", check=False)
    assert (took.returncode, refused.returncode) == (0, 255), (took.stderr, refused.stderr)


def test_a_bad_time_or_memory_is_one_line_before_anything(
    slurm_env: SlurmCluster, tmp_path: Path, isolated: Path
) -> None:
    nb = new_notebook(cells=[new_code_cell("print(1)")])
    nbformat.write(nb, tmp_path / "daily.ipynb")
    for args in (
        ("run", "-s", "slurm", "--dryrun", "-cfg", "time=abc", "utils.echo"),
        ("run", "-s", "slurm", "-cfg", "time=abc", "utils.echo"),
        (
            "run-notebook",
            "-s",
            "slurm",
            "--dryrun",
            "-cfg",
            "time=abc",
            str(tmp_path / "daily.ipynb"),
        ),
    ):
        code, out, err = cli(*args)
        assert (code, out, err) == (1, "", f"torchx-nb: error: {TIME_LINE}\n"), args
    assert get_runner().jobstore.list() == []
    assert slurm_env.run("squeue", "-h", "-n", "echo-0").stdout.strip() == ""
    # a memory sbatch's --mem cannot take (1.5 GB written as 1536.5 MB); a whole float is fine
    app = specs.AppDef("m", roles=[specs.Role("a", image="", entrypoint="true")])
    app.roles[0].resource = specs.Resource(cpu=1, gpu=0, memMB=1536.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError) as info:
        get_runner().dryrun(app, "slurm", {})
    assert str(info.value) == (
        "role a: memMB=1536.5 is not a whole number of MB; Slurm's --mem takes whole MB: give an"
        " int (e.g. memMB=4096 for 4 GB)"
    )
    app.roles[0].resource = specs.Resource(cpu=1, gpu=0, memMB=512.0)  # type: ignore[arg-type]
    script = get_runner().dryrun(app, "slurm", {}).request.materialize()
    assert " --cpus-per-task=1 --mem=512\n" in script, script  # not --mem=512.0


@pytest.mark.slow
def test_a_bad_time_in_the_notebook_is_one_line(
    slurm_env: SlurmCluster, tmp_path: Path, isolated: Path
) -> None:
    cells = [
        new_code_cell("%load_ext torchx_nb"),
        new_code_cell("%%torchx run -s slurm --dryrun -cfg time=abc\nprint('never')"),
        new_code_cell("%%torchx run -s slurm -cfg time=1h\nprint('never')"),
    ]
    nb = execute(new_notebook(cells=cells), tmp_path, allow_errors=True)
    assert text_of(nb.cells[1]) == f"UsageError: %torchx run: {TIME_LINE}\n"
    assert text_of(nb.cells[2]) == f"UsageError: %torchx run: {TIME_LINE.replace('abc', '1h')}\n"
    assert get_runner().jobstore.list() == []
