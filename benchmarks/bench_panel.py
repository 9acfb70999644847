"""The JupyterLab panel with 1,000 jobs in the store, in real JupyterLab and headless Chromium.

- first page server side: ``GET /torchx-nb/api/jobs`` (50 newest of 1,000), over loopback,
  beside JupyterLab's own ``GET /api/contents/<folder>`` for a folder of 1,000 files on the same
  server (median of --requests);
- time to first render: page load → the panel's first rows drawn, beside the file browser
  drawing that 1,000-file folder in the same page load (median of --loads);
- state change → shown: a ``%%torchx`` job's end (the time it writes last) → its panel row says
  SUCCEEDED, beside the cell's own status widget for the same job on the same page.

Run: python benchmarks/bench_panel.py [--jobs 1000] (needs the built labextension and Chromium:
bash scripts/build-labextension; apt-get install chromium)"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from targets import Targets  # noqa: E402

from tests.conftest import stored  # noqa: E402
from tests.infra.lab import (  # noqa: E402
    NotebookPage,
    chromium_page,
    jupyter_lab,
    lab_missing,
    write_notebook,
)

TARGET_PAGE_MS = 100.0
TARGET_CHANGE_S = 2.0
SCHEDULERS = ["local_cwd", "local_docker", "aws_batch", "aws_sagemaker", "slurm", "kubernetes"]
STATES = ["SUCCEEDED", "FAILED", "CANCELLED"]


def fill_store(jobs: int) -> None:
    from torchx_nb.runner import get_runner

    store = get_runner().jobstore
    for i in range(jobs):
        sched = SCHEDULERS[i % len(SCHEDULERS)]
        store.add(stored(f"{sched}://torchx/bench-{i:05d}", sched, f"bench-{i}", STATES[i % 3], i))


def timed_get(url: str, token: str) -> float:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()
    return (time.perf_counter() - t0) * 1000


FIRST_RENDER = """async () => {
    const t0 = performance.timeOrigin;
    const wait = (sel, n) => new Promise(resolve => {
        const check = () => document.querySelectorAll(sel).length >= n
            ? resolve(performance.now()) : requestAnimationFrame(check);
        check();
    });
    const [panel, files] = await Promise.all([
        wait('.tnb-job', 50), wait('.jp-DirListing-item', 50)]);
    return [panel, files];
}"""

OBSERVER = """() => {
    window.__seen = {};
    const note = (key) => { if (!(key in window.__seen)) window.__seen[key] = Date.now(); };
    new MutationObserver(() => {
        document.querySelectorAll('.tnb-job[data-state=SUCCEEDED]').forEach(li =>
            li.dataset.handle.includes('/cell-') && note('panel:' + li.dataset.handle));
        document.querySelectorAll('.jp-Cell').forEach((cell, i) =>
            cell.querySelectorAll('.torchx-nb-state').forEach(el =>
                el.dataset.state === 'SUCCEEDED' && note('widget:' + i)));
    }).observe(document.body, {subtree: true, childList: true, characterData: true,
        attributes: true, attributeFilter: ['data-state']});
}"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--changes", type=int, default=3)
    args = parser.parse_args()
    reason = lab_missing(panel=True)
    if reason:
        print(f"cannot run: {reason}")
        return 2
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        os.environ["TORCHXCONFIG"] = ""
        fill_store(args.jobs)
        root = tmp / "lab"
        files = root / "files"
        files.mkdir(parents=True)
        for i in range(args.jobs):
            (files / f"file-{i:05d}.txt").write_text("x")
        end_file = tmp / "ended"
        cell = (
            "%%torchx run -o job\n"
            "import time\n"
            "time.sleep(2)\n"
            f"open({str(end_file)!r}, 'a').write(f'{{time.time()}}\\n')\n"
        )
        cells = ["%load_ext torchx_nb"] + [cell] * args.changes
        write_notebook(root / "bench.ipynb", cells)
        with jupyter_lab(root, env={"TORCHX_NB_WIDGETS": "auto"}) as lab:
            api = [
                timed_get(f"{lab.url}/torchx-nb/api/jobs?per_page=50", lab.token)
                for _ in range(args.requests)
            ]
            contents = [
                timed_get(f"{lab.url}/api/contents/files?content=1", lab.token)
                for _ in range(args.requests)
            ]
            panel_ms: list[float] = []
            files_ms: list[float] = []
            with chromium_page() as page:
                for _ in range(args.loads):
                    page.goto(f"{lab.url}/lab/tree/files?token={lab.token}")
                    panel, browser = page.evaluate(
                        "async () => { await new Promise(r => {"
                        " const f = () => window.jupyterapp ? r() : setTimeout(f, 10); f(); });"
                        " await window.jupyterapp.started;"
                        " await window.jupyterapp.commands.execute('torchx-nb:open-panel');"
                        f" return await ({FIRST_RENDER})(); }}"
                    )
                    panel_ms.append(panel)
                    files_ms.append(browser)
                nb = NotebookPage(page, lab, "bench.ipynb").open()
                nb.command("torchx-nb:open-panel")
                page.evaluate(OBSERVER)
                nb.run_all()
                page.wait_for_function(
                    f"() => Object.keys(window.__seen).length >= {2 * args.changes}",
                    timeout=180_000,
                )
                seen: dict[str, Any] = page.evaluate("() => window.__seen")
        ends = [float(x) for x in end_file.read_text().split()]
    panel_at = sorted(v / 1000 for k, v in seen.items() if k.startswith("panel:"))
    widget_at = sorted(v / 1000 for k, v in seen.items() if k.startswith("widget:"))
    panel_delay = [p - e for p, e in zip(panel_at, sorted(ends), strict=True)]
    widget_delay = [w - e for w, e in zip(widget_at, sorted(ends), strict=True)]

    def row(name: str, ours: float, peer: float, target: str, unit: str) -> str:
        return f"| {name} | {ours:.1f} {unit} | {peer:.1f} {unit} | {ours / peer:.2f} | {target} |"

    print(f"{args.jobs} jobs in the store; peers: JupyterLab's contents API and file browser")
    print(f"with a {args.jobs}-file folder, and the cell's own status widget, in the same run")
    print("| measure | torchx_nb | peer | ratio | target |")
    print("|---|---|---|---|---|")
    print(
        row(
            "first page, server (median)",
            statistics.median(api),
            statistics.median(contents),
            f"< {TARGET_PAGE_MS:g} ms",
            "ms",
        )
    )
    print(
        row(
            "page load → first rows drawn (median)",
            statistics.median(panel_ms),
            statistics.median(files_ms),
            "",
            "ms",
        )
    )
    print(
        row(
            "job end → shown, max",
            max(panel_delay) * 1000,
            max(widget_delay) * 1000,
            f"<= {TARGET_CHANGE_S * 1000:g} ms",
            "ms",
        )
    )
    targets = Targets()
    targets.check(
        f"first page < {TARGET_PAGE_MS:g} ms",
        statistics.median(api) < TARGET_PAGE_MS,
        f"{statistics.median(api):.1f} ms",
    )
    targets.check(
        f"job end → panel ≤ {TARGET_CHANGE_S:g} s",
        max(panel_delay) <= TARGET_CHANGE_S,
        f"max {max(panel_delay):.2f} s",
    )
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
