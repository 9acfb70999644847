"""The job's outputs uploaded to the backend's object store (``s3://`` with boto3,
``gs://`` with google-cloud-storage, both from the image, imported only when needed)."""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any


def split(url: str) -> tuple[str, str, str]:
    """``scheme://bucket/key`` as its three parts."""
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key


@functools.cache
def gcs() -> Any:
    """google-cloud-storage's client, made once (the cancel watcher looks every few seconds)."""
    from google.cloud import storage  # type: ignore[attr-defined,unused-ignore]

    try:
        return storage.Client()
    except Exception:
        if not os.environ.get("STORAGE_EMULATOR_HOST"):
            raise
        return storage.Client.create_anonymous_client()


def upload(folder: str, url: str) -> None:
    """Copy every file under ``folder`` to ``url`` (``s3://B/PREFIX`` or ``gs://B/PREFIX``)."""
    scheme, bucket, prefix = split(url)
    prefix = prefix.strip("/")
    files = [
        os.path.join(root, name) for root, _, names in os.walk(folder) for name in sorted(names)
    ]
    if scheme == "s3":
        import boto3

        client = boto3.client("s3")
        for path in files:
            key = f"{prefix}/{os.path.relpath(path, folder)}".lstrip("/")
            client.upload_file(path, bucket, key)
    elif scheme == "gs":
        target = gcs().bucket(bucket)
        for path in files:
            key = f"{prefix}/{os.path.relpath(path, folder)}".lstrip("/")
            target.blob(key).upload_from_filename(path)
    else:
        raise ValueError(f"cannot upload to {url!r}: use s3:// or gs://")


def drop_stale(folder: str, url: str) -> None:
    """This rank's records an earlier attempt uploaded and this one did not write (an error
    before the retry that succeeded) leave ``url``: the result read back is this attempt's."""
    from .common import OWN, rank
    from .records import RANK0_RECORDS

    names = [f"error-{rank()}.pkl", f"error-{rank()}.txt"]
    names += list(RANK0_RECORDS) if rank() == 0 else []
    gone = [n for n in names if not os.path.exists(os.path.join(folder, OWN, n))]
    scheme, bucket, prefix = split(url)
    keys = [f"{prefix.strip('/')}/{OWN}/{name}".lstrip("/") for name in gone]
    if scheme == "s3" and keys:
        import boto3

        objects = [{"Key": key} for key in keys]
        boto3.client("s3").delete_objects(Bucket=bucket, Delete={"Objects": objects})
    elif scheme == "gs":
        from google.api_core.exceptions import NotFound

        target = gcs().bucket(bucket)
        for key in keys:
            with contextlib.suppress(NotFound):
                target.blob(key).delete()


def upload_one(path: str, url: str) -> None:
    """One file, ``path``, into the folder ``url`` (an executed notebook as it runs)."""
    scheme, bucket, prefix = split(url)
    key = f"{prefix.strip('/')}/{os.path.basename(path)}".lstrip("/")
    if scheme == "s3":
        import boto3

        boto3.client("s3").upload_file(path, bucket, key)
    elif scheme == "gs":
        gcs().bucket(bucket).blob(key).upload_from_filename(path)
