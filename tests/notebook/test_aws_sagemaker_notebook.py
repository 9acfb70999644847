"""notebooks/aws_sagemaker.ipynb in a real kernel, in a rebuilt SageMaker Studio: the home
folder (with planted credentials) is the workspace, Studio's metadata file names a domain whose
default execution role the job must run as, no Docker daemon answers, and moto_server stands in
for IAM, STS, S3, ECR and SageMaker (training jobs complete at once there and run nothing; the
container contract is tested in tests/schedulers/test_aws_sagemaker.py)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import nbformat
import pytest

from tests.infra.dockerd import DockerDaemon, Registry
from tests.infra.moto import MotoServer
from tests.notebook.test_quickstart import cell_with, execute, text_of
from tests.reliability.test_secrets import PLANTED, SECRET, layer_members, plant

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "aws_sagemaker.ipynb"
ROLE = "arn:aws:iam::123456789012:role/service-role/AmazonSageMaker-ExecutionRole-1"

pytestmark = pytest.mark.slow


def _image_layers(registry: Registry, image: str, dest: Path) -> list[Path]:
    name = image.partition("/")[2]
    repo, sep, digest = name.partition("@")
    if not sep:
        repo, _, digest = name.rpartition(":")
    accept = "application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.v2+json"
    req = urllib.request.Request(
        f"{registry.url}/v2/{repo}/manifests/{digest}", headers={"Accept": accept}
    )
    manifest = json.load(urllib.request.urlopen(req, timeout=30))
    paths = []
    for i, layer in enumerate(manifest["layers"]):
        path = dest / f"layer-{i}.tar.gz"
        with urllib.request.urlopen(
            f"{registry.url}/v2/{repo}/blobs/{layer['digest']}", timeout=60
        ) as r:
            path.write_bytes(r.read())
        paths.append(path)
    return paths


def test_aws_sagemaker_notebook_in_a_studio_home_folder(
    aws_env: MotoServer,
    docker_env: DockerDaemon,
    python_in_registry: str,
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    plant(home)
    (home / ".aws/credentials").write_text(
        f"[default]\naws_access_key_id = AKIAHOME\naws_secret_access_key = {SECRET}\n"
    )
    sm = aws_env.client("sagemaker")
    domain = sm.create_domain(
        DomainName="studio",
        AuthMode="IAM",
        DefaultUserSettings={"ExecutionRole": ROLE},
        SubnetIds=["subnet-1"],
        VpcId="vpc-1",
    )["DomainArn"].rsplit("/", 1)[1]
    meta = tmp_path / "resource-metadata.json"
    meta.write_text(json.dumps({"DomainId": domain, "ResourceName": "default"}))
    monkeypatch.setenv("TORCHX_NB_STUDIO_METADATA", str(meta))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(home / ".local/share/jupyter/torchx_nb"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # no daemon
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_IMAGE", python_in_registry)
    monkeypatch.setenv("TORCHX_NB_EXAMPLE_REPO", f"{registry.host}/nb/sagemaker")
    monkeypatch.setenv("TORCHX_NB_WIDGETS", "text")
    shutil.copy(NOTEBOOK, home / NOTEBOOK.name)
    nb = execute(nbformat.read(home / NOTEBOOK.name, as_version=4), home)

    dry = text_of(cell_with(nb, "--dryrun"))
    assert f'"RoleArn": "{ROLE}"' in dry
    assert '"InstanceCount": 2' in dry and '"InstanceType": "ml.m5.large"' in dry
    ran = text_of(cell_with(nb, "-o job"))
    assert "aws_sagemaker://torchx/cell-" in ran
    assert text_of(cell_with(nb, "job.status().state")).strip() == "SUCCEEDED"
    assert "SUCCEEDED" in text_of(cell_with(nb, "%torchx list -s aws_sagemaker"))

    job_name = ran.split("aws_sagemaker://torchx/", 1)[1].split()[0]
    created = sm.describe_training_job(TrainingJobName=job_name)
    assert created["RoleArn"] == ROLE
    assert created["OutputDataConfig"]["S3OutputPath"] == "s3://sagemaker-us-west-2-123456789012/"
    aws_env.client("s3").head_bucket(Bucket="sagemaker-us-west-2-123456789012")
    image = created["AlgorithmSpecification"]["TrainingImage"]
    assert image.startswith(f"{registry.host}/nb/sagemaker@sha256:")
    shipped: dict[str, bytes] = {}
    (tmp_path / "base-dl").mkdir()
    base_layers = len(_image_layers(registry, python_in_registry, tmp_path / "base-dl"))
    dl = tmp_path / "dl"
    dl.mkdir()
    for layer in _image_layers(registry, image, dl)[base_layers:]:
        shipped.update(layer_members(layer))
    assert any(name.endswith("aws_sagemaker.ipynb") for name in shipped), sorted(shipped)
    assert not [n for n in shipped if any(n.endswith(p) for p in PLANTED)], sorted(shipped)
    assert not [n for n, data in shipped.items() if SECRET.encode() in data]
