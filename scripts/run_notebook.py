"""Executes a notebook headless in a real kernel (nbclient) and prints each cell's outputs as text.

Usage: python scripts/run_notebook.py notebooks/quickstart.ipynb [--out executed.ipynb]
       [--kernel NAME]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def text_of(output: nbformat.NotebookNode) -> str:
    kind = output.get("output_type")
    if kind == "stream":
        return str(output.get("text", ""))
    if kind == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    data = output.get("data", {})
    return str(data.get("text/plain", "")) + "\n"


def run(
    path: Path, out: Path | None = None, timeout: int = 300, kernel: str = "python3"
) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    if out:
        nbformat.write(nb, out)
    return nb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="also save the executed notebook")
    parser.add_argument("--kernel", default="python3", help="the kernel to run it in")
    args = parser.parse_args()
    nb = run(args.notebook, args.out, kernel=args.kernel)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        print(f"--- In [{i}]: {cell.source.splitlines()[0] if cell.source else ''}")
        for output in cell.get("outputs", []):
            sys.stdout.write(text_of(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
