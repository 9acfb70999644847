"""Build hook: the wheel ships the JupyterLab extension (the panel) as shared data under
``share/jupyter/labextensions/torchx-nb``. From a source checkout where it is not built yet, it
is built with npm (``scripts/build-labextension``); without npm, everything else installs and
one line says how to get the panel (the Jupyter server's log says it again at start)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUILT = "torchx_nb/labextension"
TARGET = "share/jupyter/labextensions/torchx-nb"
NO_PANEL = (
    "torchx_nb: installed without the JupyterLab panel: Node.js with npm was not found to build"
    " labextension/; install Node.js and reinstall (or install a released wheel) to get it"
)


class LabextensionHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        built = root / BUILT
        if not (built / "package.json").exists() and (root / "labextension/src").is_dir():
            self._build(root)
        if not (built / "package.json").exists():
            self.app.display_warning(NO_PANEL)
            return
        shared = build_data["shared_data"]
        for path in sorted(built.rglob("*")):
            if path.is_file():
                shared[str(path)] = f"{TARGET}/{path.relative_to(built).as_posix()}"
        shared[str(root / "labextension/install.json")] = f"{TARGET}/install.json"

    def _build(self, root: Path) -> None:
        if shutil.which("npm") is None or os.environ.get("TORCHX_NB_SKIP_LABEXTENSION"):
            return
        self.app.display_info("torchx_nb: building the JupyterLab extension with npm")
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["PYTHON"] = sys.executable
        try:
            subprocess.run(["bash", str(root / "scripts/build-labextension")], check=True, env=env)
        except (OSError, subprocess.CalledProcessError) as e:
            self.app.display_warning(f"torchx_nb: building the JupyterLab extension failed ({e})")
