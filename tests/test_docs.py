"""The README says what the code does: its option tables are generated from the backends'
typed options, and must be current."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_the_readme_option_tables_come_from_the_typed_options() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_options.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, "README.md is stale: run python scripts/readme_options.py"
