"""The sweep trial's watcher (the ``sh`` script a trial's program runs under) and the private
record of disrupted pods, against a real ``sh`` and real files: a program's own exit 170 is not
the cancel's, and a damaged or unwritable record never breaks status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchx_nb.schedulers.kubernetes import describe
from torchx_nb.schedulers.kubernetes.spot import preemptions, record_path


def _run_trial(tmp_path: Path, code: int, marked: bool, first: str = "pass") -> int:
    podinfo = tmp_path / "pod"
    podinfo.mkdir()
    if marked:
        (podinfo / "annotations").write_text(f'{describe.CANCEL_ANNOTATION}="alice"\n')
    script = describe._TRIAL_SH.replace(describe._PODINFO, str(podinfo))
    prog = [sys.executable, "-c", f"import sys; {first}; sys.exit({code})"]
    return subprocess.run(["sh", "-c", script, "sh", *prog], timeout=60).returncode


@pytest.mark.parametrize(
    ("code", "marked", "ends"),
    [
        (0, False, 0),
        (3, False, 3),
        # the program's own 170 read as a cancel (and failed its index for good) before
        (describe.CANCELLED_EXIT, False, 1),
        (3, True, describe.CANCELLED_EXIT),
        # a marked program that exits 0 (on SIGTERM) completed its index before (#50)
        (0, True, describe.CANCELLED_EXIT),
    ],
)
def test_the_trial_watcher_ends_170_only_for_the_cancel_mark(
    tmp_path: Path, code: int, marked: bool, ends: int
) -> None:
    assert _run_trial(tmp_path, code, marked) == ends


def test_a_pod_marked_before_it_starts_never_runs_its_program(tmp_path: Path) -> None:
    """A pending pod marked cancelled that gets a node later: its program ran for about a
    second before the watcher first looked (#50)."""
    ran = tmp_path / "ran"
    assert _run_trial(tmp_path, 0, True, f"open({str(ran)!r}, 'w')") == describe.CANCELLED_EXIT
    assert not ran.exists()


def _pod(name: str, at: str = "2026-11-28T10:00:00Z") -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        },
        "status": {
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "lastTransitionTime": at,
                }
            ]
        },
    }


def test_a_damaged_record_is_read_as_nothing_seen_and_an_unwritable_one_is_not_kept() -> None:
    """An entry not of ours raised AttributeError/KeyError from every status of the job; a record
    that could not be written raised out of describe (found by the hunt)."""
    path = record_path("preemptions", "ns:job-1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"p": 1, "q": {"at": "soon"}, "r": {"index": 0}}')
    found = preemptions("ns:job-1", [_pod("job-1-0-abc")])
    assert len(found) == 1
    path.unlink()
    os.chmod(path.parent, 0o500)
    try:
        if os.access(path.parent, os.W_OK):  # root writes anyway: make the folder a file
            os.chmod(path.parent, 0o700)
            path.parent.rename(path.parent.with_name("moved"))
            path.parent.write_text("not a folder")
        assert len(preemptions("ns:job-1", [_pod("job-1-0-abc")])) == 1
    finally:
        if path.parent.is_dir():
            os.chmod(path.parent, 0o700)
