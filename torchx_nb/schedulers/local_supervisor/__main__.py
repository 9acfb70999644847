"""``python -I -S local_supervisor STATE_DIR``: run this folder. Python puts the folder on
``sys.path`` (never its parent: no torchx_nb module can be imported by mistake); the package
is loaded from its path under its own name so that its modules' relative imports hold."""

import importlib
import importlib.util
import os
import sys

if __package__:  # python -m torchx_nb.schedulers.local_supervisor STATE_DIR
    from .supervisor import main
else:
    _here = os.path.dirname(os.path.abspath(__file__))
    _spec = importlib.util.spec_from_file_location(
        "local_supervisor", os.path.join(_here, "__init__.py"), submodule_search_locations=[_here]
    )
    assert _spec is not None and _spec.loader is not None
    sys.modules["local_supervisor"] = _package = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_package)
    main = importlib.import_module("local_supervisor.supervisor").main

sys.exit(main(sys.argv))
