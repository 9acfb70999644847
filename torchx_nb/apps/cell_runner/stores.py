"""Where a job's checkpoint generations are kept: a flat key space under one root —
a folder (the local app folder, the Slurm job folder), S3 (boto3), GCS
(google-cloud-storage), or SageMaker's own ``CheckpointConfig`` sync. The SDKs are imported
only when a store first talks to its service."""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

from .upload import gcs


def _split(url: str) -> tuple[str, str, str]:
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key.strip("/")


class Store:
    """A flat key space under one root: what the generations and the ledger are made of."""

    url = ""

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (relative to the root)."""
        raise NotImplementedError

    def put_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def get_file(self, key: str, path: str) -> None:
        raise NotImplementedError

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none."""
        raise NotImplementedError

    def delete(self, keys: list[str]) -> None:
        raise NotImplementedError

    syncs_itself = False  # SageMaker: the platform restores and saves the folder


class LocalStore(Store):
    """A folder on this machine or a shared filesystem; every write lands by ``os.replace``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.url = f"file://{root}"

    def _path(self, key: str) -> str:
        norm = os.path.normpath(key)
        if norm.startswith(("..", "/")):
            raise ValueError(f"checkpoint key {key!r} is outside the store")
        return os.path.join(self.root, norm)

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        found = []
        for folder, _, names in os.walk(base):
            for name in names:
                if not name.startswith(".torchx-nb-part-"):
                    rel = os.path.relpath(os.path.join(folder, name), self.root)
                    found.append(rel.replace(os.sep, "/"))
        return sorted(found)

    def _landing(self, key: str) -> tuple[str, str]:
        target = self._path(key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        part = os.path.join(os.path.dirname(target), f".torchx-nb-part-{os.getpid()}")
        return target, part

    def put_file(self, key: str, path: str) -> None:
        target, part = self._landing(key)
        shutil.copyfile(path, part)
        os.replace(part, target)

    def put_bytes(self, key: str, data: bytes) -> None:
        target, part = self._landing(key)
        with open(part, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, target)

    def get_file(self, key: str, path: str) -> None:
        shutil.copyfile(self._path(key), path)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path(key))


class SageMakerStore(LocalStore):
    """SageMaker's ``CheckpointConfig``: the platform uploads ``LocalPath`` as it changes and
    restores it before every attempt; only the ledger is kept there, as a file."""

    syncs_itself = True

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.url = "sagemaker:"


class S3Store(Store):
    """``s3://BUCKET/PREFIX`` through boto3 (``AWS_ENDPOINT_URL`` and profiles honoured)."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        _, self.bucket, self.prefix = _split(url)
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("s3")
        return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}".lstrip("/")

    def keys(self, prefix: str) -> list[str]:
        full = self._key(prefix)
        found = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full
        )
        for page in pages:
            for item in page.get("Contents", []):
                found.append(item["Key"][len(self._key("")) :])
        return sorted(found)

    def put_file(self, key: str, path: str) -> None:
        self.client.upload_file(path, self.bucket, self._key(key))

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_file(self, key: str, path: str) -> None:
        self.client.download_file(self.bucket, self._key(key), path)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self.client.exceptions.NoSuchKey:
            return None
        return bytes(answer["Body"].read())

    def delete(self, keys: list[str]) -> None:
        for at in range(0, len(keys), 1000):  # DeleteObjects takes 1000 keys at most
            chunk = [{"Key": self._key(k)} for k in keys[at : at + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})


class GcsStore(Store):
    """``gs://BUCKET/PREFIX`` through google-cloud-storage (``STORAGE_EMULATOR_HOST`` too)."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        _, self.bucket_name, self.prefix = _split(url)
        self._client = client

    @property
    def bucket(self) -> Any:
        if self._client is None:
            self._client = gcs()  # the runner's client (the emulator's, anonymous, in tests)
        return self._client.bucket(self.bucket_name)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}".lstrip("/")

    def keys(self, prefix: str) -> list[str]:
        base = len(self._key(""))
        blobs = self.bucket.client.list_blobs(self.bucket_name, prefix=self._key(prefix))
        return sorted(b.name[base:] for b in blobs)

    def put_file(self, key: str, path: str) -> None:
        self.bucket.blob(self._key(key)).upload_from_filename(path)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.bucket.blob(self._key(key)).upload_from_string(data)

    def get_file(self, key: str, path: str) -> None:
        self.bucket.blob(self._key(key)).download_to_filename(path)

    def get_bytes(self, key: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        try:
            return bytes(self.bucket.blob(self._key(key)).download_as_bytes())
        except NotFound:
            return None

    def delete(self, keys: list[str]) -> None:
        from google.api_core.exceptions import NotFound

        bucket = self.bucket
        for key in keys:
            with contextlib.suppress(NotFound):
                bucket.blob(self._key(key)).delete()


def store_for(url: str, local_base: str) -> Store:
    """The store a checkpoint URL names; ``local_base``: the local folder (SageMaker's)."""
    if url.startswith("file://"):
        return LocalStore(url.removeprefix("file://"))
    if url.startswith("s3://") and _split(url)[1]:
        return S3Store(url)
    if url.startswith("gs://") and _split(url)[1]:
        return GcsStore(url)
    if url == "sagemaker:":
        return SageMakerStore(local_base)
    raise ValueError(
        f"checkpoint URL {url!r} is none of file://PATH, s3://BUCKET/PREFIX,"
        " gs://BUCKET/PREFIX or sagemaker:"
    )
