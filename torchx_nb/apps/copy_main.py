"""``python -m torchx_nb.apps.copy_main --src URL --dst URL``: copy one file between fsspec
locations (local paths, ``s3://``, ``gs://``, ``memory://``...), as ``utils.copy`` runs it."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="copies a file between fsspec locations")
    parser.add_argument("--src", required=True, help="fsspec location of the file to read")
    parser.add_argument("--dst", required=True, help="fsspec location to write the copy to")
    parser.add_argument("--bufsize", type=int, default=64 * 1024, help="copy buffer size")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    import fsspec

    args = parse_args(argv)
    print(f"copying from {args.src} to {args.dst}", flush=True)
    src_fs, src_path = fsspec.core.url_to_fs(args.src)
    dst_fs, dst_path = fsspec.core.url_to_fs(args.dst)
    parent = os.path.dirname(dst_path)
    if parent:
        with contextlib.suppress(FileExistsError):
            dst_fs.mkdir(parent, create_parents=True)
    if src_fs == dst_fs:
        src_fs.copy(src_path, dst_path)
    else:
        with src_fs.open(src_path, "rb") as src, dst_fs.open(dst_path, "wb") as dst:
            shutil.copyfileobj(src, dst, args.bufsize)


if __name__ == "__main__":
    main(sys.argv[1:])
