"""A real JupyterLab 4 server on loopback and Debian's Chromium driven by Playwright: the
harness shared by the notebook widget tests and the JupyterLab panel tests.

Each server gets its own root folder, token, port and Jupyter config/data/runtime folders, so two
test runs on one machine never share state. Screenshots go to ``$TORCHX_NB_SCREENSHOTS``
(default ``test-screenshots/`` in the repository)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("TORCHX_NB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def screenshot_dir() -> Path:
    path = Path(os.environ.get("TORCHX_NB_SCREENSHOTS", ROOT / "test-screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


LABEXTENSION = ROOT / "torchx_nb" / "labextension"
SERVER_CONFIG = ROOT / "jupyter-config" / "jupyter_server_config.d" / "torchx_nb.json"


def lab_missing(panel: bool = False) -> str | None:
    """Why the browser tests cannot run here, or None; ``panel``: the JupyterLab extension must
    be built too."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if panel and not (LABEXTENSION / "package.json").is_file():
        return "the JupyterLab extension is not built (bash scripts/build-labextension)"
    for module in ("jupyterlab", "playwright"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[test]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    """A running JupyterLab: its URL, token, root folder and process."""

    url: str
    token: str
    root: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, method: str, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = resp.read()
        return json.loads(data) if data else None

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _install_extensions(home: Path) -> dict[str, str]:
    """What ``pip install torchx_nb`` puts under sys.prefix, for this server only: the server
    extension's config file and the built labextension (an editable install has neither)."""
    config = home / "config" / "jupyter_server_config.d"
    config.mkdir(parents=True, exist_ok=True)
    shutil.copy(SERVER_CONFIG, config)
    share = home / "share"
    (share / "labextensions").mkdir(parents=True, exist_ok=True)
    link = share / "labextensions" / "torchx-nb"
    if LABEXTENSION.is_dir() and not link.exists():
        link.symlink_to(LABEXTENSION, target_is_directory=True)
    return {"JUPYTER_PATH": str(share)}


@contextmanager
def jupyter_lab(
    root: Path,
    env: dict[str, str] | None = None,
    app: str = "jupyterlab",
    port: int | None = None,
    token: str | None = None,
    args: list[str] | None = None,
) -> Iterator[Lab]:
    """Start ``jupyter lab`` (or ``app="notebook"``: Notebook 7) serving ``root`` on a free
    loopback port, with torchx_nb's server and lab extensions on; stop it at the end. A
    ``port`` and ``token`` of a server stopped before start it again as it was (a restart);
    ``args`` are more options (``--TorchxNbApp.heartbeat=300``)."""
    root.mkdir(parents=True, exist_ok=True)
    home = root.parent / f"{root.name}-jupyter"
    for sub in ("config", "data", "runtime", "settings", "workspaces"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    installed = _install_extensions(home)
    # JupyterLab must not restore a previous layout nor show news/announcements.
    overrides = home / "data" / "lab-settings"
    overrides.mkdir(exist_ok=True)
    port = port or _free_port()
    token = token or secrets.token_hex(16)
    log = home / "lab.log"
    full_env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_PLATFORM_DIRS": "1",
        **installed,
        **(env or {}),
    }
    (home / "settings" / "@jupyterlab").mkdir(parents=True, exist_ok=True)
    ext = home / "settings" / "@jupyterlab" / "apputils-extension"
    ext.mkdir(parents=True, exist_ok=True)
    (ext / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                app,
                "--no-browser",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.open_browser=False",
                "--LabApp.news_url=",
                "--LabApp.expose_app_in_browser=True",
                "--JupyterNotebookApp.expose_app_in_browser=True",
                "--allow-root",
                *(args or []),
            ],
            cwd=root,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    lab = Lab(f"http://127.0.0.1:{port}", token, root, proc, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                lab.api("GET", "/api/status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not start:\n{lab.log_text()}") from None
                time.sleep(0.2)
        yield lab
    finally:
        with contextlib.suppress(Exception):
            for kernel in lab.api("GET", "/api/kernels") or []:
                lab.api("DELETE", f"/api/kernels/{kernel['id']}")
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(home / "runtime", ignore_errors=True)


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Playwright page in Debian's headless Chromium (no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook of code cells, with the python3 kernel."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)
    return path


class NotebookPage:
    """Helpers for one notebook open in JupyterLab."""

    def __init__(self, page: Any, lab: Lab, name: str) -> None:
        self.page = page
        self.lab = lab
        self.name = name

    def open(self) -> NotebookPage:
        self.page.goto(self.lab.notebook_url(self.name))
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
        self.wait_kernel_idle()
        return self

    def wait_kernel_idle(self, timeout: float = 60.0) -> None:
        self.page.wait_for_function(
            """() => {
                const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                const k = w && w.sessionContext && w.sessionContext.session
                    && w.sessionContext.session.kernel;
                return k && k.connectionStatus === 'connected' && k.status === 'idle';
            }""",
            timeout=timeout * 1000,
        )

    def run_all(self) -> None:
        self.page.locator(".jp-NotebookPanel .jp-Notebook").first.click()
        self.page.keyboard.press("Escape")
        self.command("notebook:run-all-cells")

    def run_cell(self, index: int) -> None:
        cell = self.cell(index)
        cell.locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Shift+Enter")

    def command(self, command_id: str) -> None:
        self.page.evaluate(
            "async (id) => { await window.jupyterapp.commands.execute(id); }",
            command_id,
        )

    def cell(self, index: int) -> Any:
        return self.page.locator(".jp-NotebookPanel .jp-Cell").nth(index)

    def outputs(self, index: int) -> Any:
        return self.cell(index).locator(".jp-OutputArea-output")

    def save(self, timeout: float = 90) -> None:
        """Save and wait until JupyterLab shows the notebook clean. An output that lands while
        the save is in flight (a job's full snapshot follows its end) makes it dirty again, so
        the save is asked again until a clean state is seen (on a loaded machine one round can
        miss); the caller then reads the file and checks what it holds."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        deadline = time.monotonic() + timeout
        while True:
            self.command("docmanager:save")
            try:
                self.page.wait_for_function(
                    "() => !document.querySelector('.jp-mod-dirty')", timeout=10_000
                )
                return
            except PlaywrightTimeout:
                if time.monotonic() > deadline:
                    raise

    def screenshot(self, name: str) -> Path:
        path = screenshot_dir() / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path
