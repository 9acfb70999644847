"""``python -m torchx_nb.apps.cell_runner CELL.py [ARGS...]``: the runner where torchx_nb is
installed (a job runs the copy shipped beside it, through ``.torchx-nb/cell_main.py``)."""

from __future__ import annotations

import sys

from .main import main

sys.exit(main(sys.argv))
