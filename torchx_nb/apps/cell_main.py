"""The cell runner's entry point (torchx_nb): ``python .torchx-nb/cell_main.py CELL.py
[ARGS...]`` or ``--notebook NB.ipynb [--cell-timeout S]`` in a job, where the runner, the
package ``torchx_nb.apps.cell_runner``, is shipped beside this file as the folder
``torchx_nb_cell_runner/`` (standard library only: images need not have torchx_nb); ``python
-m torchx_nb.apps.cell_main`` where torchx_nb is installed. The runner's names stay
importable from here (``CANCELLED_EXIT``, ``grid_point``…; the rest from the package)."""

from __future__ import annotations

import sys

if __package__:  # torchx_nb.apps.cell_main, imported or run with -m
    from torchx_nb.apps.cell_runner import CANCEL_MARK, CANCELLED_EXIT, OWN, grid_point, main
else:  # shipped: the script of a job, its runner the folder beside it, loaded by path (no
    # sys.path entry needed: python -I does not put this file's folder there)
    import importlib.util
    import os

    _folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchx_nb_cell_runner")
    _spec = importlib.util.spec_from_file_location(
        "torchx_nb_cell_runner",
        os.path.join(_folder, "__init__.py"),
        submodule_search_locations=[_folder],
    )
    assert _spec is not None and _spec.loader is not None
    _runner = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _runner
    _spec.loader.exec_module(_runner)
    main = _runner.main

__all__ = ["CANCELLED_EXIT", "CANCEL_MARK", "OWN", "grid_point", "main"]

if __name__ == "__main__":
    sys.exit(main(sys.argv))
