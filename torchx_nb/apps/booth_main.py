"""``python -m torchx_nb.apps.booth_main --x1 X --x2 Y``: evaluate the Booth function
``(x1 + 2*x2 - 7)^2 + (2*x1 + x2 - 5)^2`` and store ``{"booth_eval": value}`` as JSON at
``TRACKER_BASE/TRIAL_IDX``, the layout TorchX's ``FsspecResultTracker`` reads back."""

from __future__ import annotations

import argparse
import json
import sys


def booth(x1: float, x2: float) -> float:
    return (x1 + 2 * x2 - 7) ** 2 + (2 * x1 + x2 - 5) ** 2


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="evaluates the booth function at (x1, x2)")
    parser.add_argument("--x1", type=float, required=True, help="x1")
    parser.add_argument("--x2", type=float, required=True, help="x2")
    parser.add_argument(
        "--tracker_base", default="/tmp/torchx-util-booth", help="fsspec URL of the results folder"
    )
    parser.add_argument("--trial_idx", type=int, default=0, help="trial index (for HPO)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    import fsspec

    args = parse_args(argv)
    value = booth(args.x1, args.x2)
    mapper = fsspec.get_mapper(args.tracker_base, create=True)
    mapper[str(args.trial_idx)] = json.dumps({"booth_eval": value}, indent=2).encode()
    print(f"booth({args.x1}, {args.x2}) = {value}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
