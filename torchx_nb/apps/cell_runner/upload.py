"""The job's outputs uploaded to the backend's object store (``s3://`` with boto3,
``gs://`` with google-cloud-storage, both from the image, imported only when needed)."""

from __future__ import annotations

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


def upload_one(path: str, url: str) -> None:
    """One file, ``path``, into the folder ``url`` (an executed notebook as it runs)."""
    scheme, bucket, prefix = split(url)
    key = f"{prefix.strip('/')}/{os.path.basename(path)}".lstrip("/")
    if scheme == "s3":
        import boto3

        boto3.client("s3").upload_file(path, bucket, key)
    elif scheme == "gs":
        gcs().bucket(bucket).blob(key).upload_from_filename(path)
