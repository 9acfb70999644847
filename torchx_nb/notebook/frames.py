"""pandas DataFrames for ``%torchx list``, ``%torchx outputs``, ``%torchx runopts`` and
``%torchx schedulers`` (pandas is imported here, never when the extension loads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchx_nb.specs.api import runopts

if TYPE_CHECKING:
    import pandas as pd

JOB_COLUMNS = ["handle", "scheduler", "name", "state", "submitted", "duration", "queued", "ran"]


def jobs_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per job, newest first; ``submitted`` in local time (to the second);
    ``duration`` and its split at the job's start, ``queued`` and ``ran``, as ``m:ss`` /
    ``h:mm:ss`` text (empty when unknown)."""
    import pandas as pd

    from torchx_nb.local_time import local_zone
    from torchx_nb.phases import fmt_duration

    frame = pd.DataFrame(rows, columns=[*JOB_COLUMNS, "msg"])
    local = local_zone()
    frame["submitted"] = (
        pd.to_datetime(frame["submitted"], unit="s", utc=True).dt.tz_convert(local).dt.floor("s")
    )
    for column in ("duration", "queued", "ran"):
        frame[column] = [
            "" if d is None or pd.isna(d) else fmt_duration(float(d)) for d in frame[column]
        ]
    return frame.drop(columns=["msg"]) if frame["msg"].eq("").all() else frame


def outputs_frame(files: list[Any]) -> pd.DataFrame:
    """A job's output files (``results.OutputFile``): path and size in bytes."""
    import pandas as pd

    return pd.DataFrame([(f.path, f.size) for f in files], columns=["path", "size"])


def runopts_frame(opts: runopts) -> pd.DataFrame:
    """A scheduler's options: name, type, default, required, help."""
    import pandas as pd

    rows = [
        {
            "option": key,
            "type": getattr(opt.opt_type, "__name__", str(opt.opt_type)),
            "default": opt.default,
            "required": opt.is_required,
            "help": opt.help,
        }
        for key, opt in opts
    ]
    return pd.DataFrame(rows, columns=["option", "type", "default", "required", "help"])


def all_runopts_frame(runner: Any) -> pd.DataFrame:
    """Every scheduler's options, one row per option; a scheduler that cannot load (a missing
    SDK) gets one row saying why."""
    import pandas as pd

    frames = []
    for name in runner.scheduler_backends():
        try:
            frame = runopts_frame(runner.scheduler_run_opts(name))
        except Exception as e:
            from torchx_nb.errors import one_line

            frame = pd.DataFrame([{"option": "", "help": f"unavailable: {one_line(e)}"}])
        frame.insert(0, "scheduler", name)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True).fillna("")


def schedulers_frame(factories: Mapping[str, Any]) -> pd.DataFrame:
    import pandas as pd

    rows = [{"scheduler": n, "module": getattr(f, "module", "")} for n, f in factories.items()]
    return pd.DataFrame(rows, columns=["scheduler", "module"])
