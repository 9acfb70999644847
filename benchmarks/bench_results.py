"""Results benchmarks:

1. Cell start to its value in the kernel: ``%%torchx run -s local_cwd -o job`` of ``6 * 7`` then
   ``job.result()``, in a warm in-process IPython shell, beside the same cell run plainly
   (``--workspace none``: no cell runner, no result) until it ends.
2. A 100 MB output file back from moto_server's S3 on 127.0.0.1 (``job.download``'s code path),
   beside a raw HTTP GET of the same object streamed to a file: the loopback bandwidth; and the
   same file from a local output folder beside ``shutil.copyfile``. Peak Python memory of each
   download (tracemalloc).

Run: python benchmarks/bench_results.py [--runs N] [--mb 100]"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from targets import Targets  # noqa: E402

TARGET_RESULT_S = 1.0
TARGET_BANDWIDTH = 0.8
TARGET_PEAK_MB = 32.0


def bench_round_trip(runs: int) -> dict[str, list[float]]:
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    ip = start_ipython()
    ip.run_line_magic("load_ext", "torchx_nb")
    out: dict[str, list[float]] = {"result": [], "plain": []}
    for i in range(runs + 1):
        t0 = time.perf_counter()
        with capture_output():
            ip.run_cell_magic("torchx", "run -s local_cwd -o job", "6 * 7\n")
        value = ip.user_ns["job"].result()
        t1 = time.perf_counter()
        assert value == 42, value
        t2 = time.perf_counter()
        with capture_output():
            ip.run_cell_magic("torchx", "run -s local_cwd --workspace none -o plain", "6 * 7\n")
        status = ip.user_ns["plain"].wait(interval=0.05)
        t3 = time.perf_counter()
        assert status.state.name == "SUCCEEDED"
        if i:
            out["result"].append(t1 - t0)
            out["plain"].append(t3 - t2)
    return out


def _timed(fn: object) -> tuple[float, float]:
    """Seconds and peak traced MB of ``fn()``."""
    tracemalloc.start()
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 1e6


def bench_download(mb: int, runs: int, tmp: Path) -> dict[str, list[tuple[float, float]]]:
    from tests.infra.moto import start_moto
    from torchx_nb.results import LocalStore, S3Store, download

    server = start_moto(tmp / "moto", None)
    try:
        for key, value in server.env.items():
            os.environ[key] = value
        s3 = server.client("s3")
        s3.create_bucket(
            Bucket="bench", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
        src = tmp / "out" / "model.bin"
        src.parent.mkdir()
        with open(src, "wb") as f:
            for _ in range(mb):
                f.write(os.urandom(1 << 20))
        s3.upload_file(str(src), "bench", "runs/job/model.bin")
        url = s3.generate_presigned_url(
            "get_object", Params={"Bucket": "bench", "Key": "runs/job/model.bin"}
        )

        def raw_get() -> None:
            with urllib.request.urlopen(url) as r, open(tmp / "http" / "model.bin", "wb") as f:
                while chunk := r.read(1 << 20):
                    f.write(chunk)

        results: dict[str, list[tuple[float, float]]] = {
            k: [] for k in ("s3", "http", "local", "copy")
        }
        for i in range(runs + 1):
            for name, fn in (
                ("http", raw_get),
                ("s3", lambda: download(S3Store("s3://bench/runs/job/"), tmp / "s3")),
                ("copy", lambda: shutil.copyfile(src, tmp / "copy" / "model.bin")),
                ("local", lambda: download(LocalStore(f"file://{src.parent}"), tmp / "local")),
            ):
                # every path writes a new file, as a download into a new folder does
                shutil.rmtree(tmp / name, ignore_errors=True)
                (tmp / name).mkdir()
                seconds, peak = _timed(fn)
                if i:
                    results[name].append((seconds, peak))
        assert (tmp / "s3" / "model.bin").stat().st_size == mb << 20
        assert (tmp / "local" / "model.bin").read_bytes()[:4096] == src.read_bytes()[:4096]
        return results
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    targets = Targets()
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["TORCHX_NB_DATA_DIR"] = str(tmp / "data")
        os.environ["TORCHX_NB_WIDGETS"] = "text"
        os.environ["TORCHXCONFIG"] = ""
        (tmp / "nb").mkdir()
        os.chdir(tmp / "nb")
        r = bench_round_trip(args.runs)
        res, plain = statistics.median(r["result"]), statistics.median(r["plain"])
        print(f"\ncell start → value in the kernel, local_cwd, {args.runs} runs (median s)")
        print(f"{'path':<48}{'seconds':>10}{'ratio':>8}")
        print(f"{'%%torchx run -o job; job.result()':<48}{res:>10.3f}{res / plain:>8.2f}")
        print(f"{'%%torchx run --workspace none; wait (peer)':<48}{plain:>10.3f}{1.0:>8.2f}")
        targets.check(
            f"cell start to result < {TARGET_RESULT_S:.0f} s",
            res < TARGET_RESULT_S,
            f"{res:.3f} s ({res / plain:.2f}x the plain run)",
        )
        os.chdir(home)
        d = bench_download(args.mb, args.runs, tmp)
        print(f"\n{args.mb} MB output file back, {args.runs} runs (median)")
        print(f"{'path':<48}{'MB/s':>10}{'ratio':>8}{'peak MB':>10}")
        rate = {k: args.mb * 1.048576 / statistics.median(s for s, _ in v) for k, v in d.items()}
        peak = {k: max(p for _, p in v) for k, v in d.items()}
        for key, label, peer in (
            ("s3", "download() from S3 (moto, 127.0.0.1)", "http"),
            ("http", "raw HTTP GET of the same object (peer)", "http"),
            ("local", "download() from a local output folder", "copy"),
            ("copy", "shutil.copyfile (peer)", "copy"),
        ):
            print(f"{label:<48}{rate[key]:>10.0f}{rate[key] / rate[peer]:>8.2f}{peak[key]:>10.1f}")
        for key, peer, where in (("s3", "http", "S3"), ("local", "copy", "a local folder")):
            ratio = rate[key] / rate[peer]
            targets.check(
                f"{args.mb} MB from {where} at ≥ {TARGET_BANDWIDTH:.0%} of the peer,"
                f" < {TARGET_PEAK_MB:.0f} MB peak",
                ratio >= TARGET_BANDWIDTH and peak[key] < TARGET_PEAK_MB,
                f"{ratio:.2f}x, {peak[key]:.1f} MB",
            )
    return targets.exit_code()


if __name__ == "__main__":
    sys.exit(main())
