"""pandas DataFrames for ``%torchx list``, ``%torchx runopts`` and ``%torchx schedulers``
(pandas is imported here, never when the extension loads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchx_nb.specs.api import runopts

if TYPE_CHECKING:
    import pandas as pd

JOB_COLUMNS = ["handle", "scheduler", "name", "state", "submitted", "duration"]


def jobs_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per job, newest first; ``submitted`` as timestamps, ``duration`` as timedeltas."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=[*JOB_COLUMNS, "msg"])
    frame["submitted"] = pd.to_datetime(frame["submitted"], unit="s", utc=True).dt.floor("s")
    frame["duration"] = pd.to_timedelta(frame["duration"], unit="s").dt.round("1s")
    return frame.drop(columns=["msg"]) if frame["msg"].eq("").all() else frame


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


def schedulers_frame(factories: Mapping[str, Any]) -> pd.DataFrame:
    import pandas as pd

    rows = [{"scheduler": n, "module": getattr(f, "module", "")} for n, f in factories.items()]
    return pd.DataFrame(rows, columns=["scheduler", "module"])
