"""Shared log reading: when each line of a local log file was written."""

from __future__ import annotations

from pathlib import Path


def test_line_times_follow_a_growing_times_file_and_skip_damaged_entries(tmp_path: Path) -> None:
    """``LineTimes`` maps line numbers to the time their chunk was written: entries say where
    a chunk's lines begin; a line in the middle of a chunk takes its chunk's time; a damaged
    entry is skipped; entries appended later are read when asked; no file is no times."""
    from torchx_nb.schedulers.logs import LineTimes

    log = tmp_path / "combined.log"
    assert LineTimes(log).time_of(0) is None
    times = tmp_path / "combined.log.times"
    times.write_bytes(b"0 10.5\n2 11.0\ngarbage\n3 12.25\n")
    lt = LineTimes(log)
    assert [lt.time_of(i) for i in range(5)] == [10.5, 10.5, 11.0, 12.25, 12.25]
    with times.open("ab") as f:
        f.write(b"5 13.0\n6 1")  # the last entry still being written
    assert lt.time_of(5) == 13.0
    assert lt.time_of(6) == 13.0
    with times.open("ab") as f:
        f.write(b"4.0\n")
    assert lt.time_of(7) == 14.0
    lt.close()
