"""Cancel marks: an array task whose backend cannot stop one task (GCP Batch) is given
``$TORCHX_NB_CANCEL_POLL`` (seconds); the runner looks that often for a cancel mark
(``.torchx-nb/cancel`` under its upload target) and, once it is there, uploads what the
program wrote so far and exits with ``CANCELLED_EXIT``."""

from __future__ import annotations

import os
import sys
import threading
import time

from .common import OWN
from .upload import gcs, split, upload

CANCEL_MARK = "cancel"  # in OWN under a trial's upload target: "stop this trial"
CANCELLED_EXIT = 170  # the exit status of a trial stopped by its cancel mark


def cancel_requested(url: str) -> bool:
    """Whether the object ``url`` exists: a trial's cancel mark (``gs://``: only GCP Batch,
    which cannot stop one task of a job, gives its tasks one)."""
    scheme, bucket, key = split(url)
    if scheme != "gs":
        raise ValueError(f"a cancel mark is looked for in gs:// only, not {url!r}")
    # no retries of its own: the watcher looks again in a few seconds anyway
    return bool(gcs().bucket(bucket).blob(key).exists(timeout=10, retry=None))


def looked_for(mark: str, warn: bool) -> bool:
    """Whether the cancel mark is there; a look that fails is a warning (the first one only)
    and counts as no mark: the program runs on rather than fail for a storage hiccup."""
    try:
        return cancel_requested(mark)
    except Exception as e:
        if warn:
            sys.stderr.write(f"torchx_nb: cannot look for this trial's cancel mark: {e}\n")
        return False


def watch_cancel(folder: str) -> bool:
    """For a task given a cancel mark to look for (``$TORCHX_NB_CANCEL_POLL`` with an upload
    target): whether it was cancelled before it started; if not, a thread looks for the mark
    from now on. False at once for any other job."""
    url = os.environ.get("TORCHX_NB_OUTPUT_URL", "")
    poll = os.environ.get("TORCHX_NB_CANCEL_POLL", "")
    if not (url and poll):
        return False
    mark = f"{url.rstrip('/')}/{OWN}/{CANCEL_MARK}"
    if looked_for(mark, warn=True):
        sys.stderr.write("torchx_nb: this trial was cancelled before it started\n")
        return True
    every = max(float(poll), 0.1) if poll.replace(".", "", 1).isdigit() else 5.0
    threading.Thread(target=_watch, args=(mark, every, folder, url), daemon=True).start()
    return False


def _watch(mark: str, every: float, folder: str, url: str) -> None:
    """Look for ``mark`` every ``every`` seconds; once it is there, upload the outputs so far
    and end the process (and so the task) with ``CANCELLED_EXIT``."""
    while True:
        time.sleep(every)
        if looked_for(mark, warn=False):
            sys.stderr.write("torchx_nb: this trial was cancelled\n")
            sys.stderr.flush()
            try:
                upload(folder, url)
            except Exception as e:
                sys.stderr.write(f"torchx_nb: the outputs were not uploaded to {url}: {e}\n")
            os._exit(CANCELLED_EXIT)
