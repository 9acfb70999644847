"""Writes the example notebooks (kept as code so they stay reviewable in diffs).

Run: python scripts/make_notebooks.py"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOKS: dict[str, list[tuple[str, str, list[str]]]] = {}

NOTEBOOKS["quickstart.ipynb"] = [
    (
        "md",
        """# torchx_nb quickstart

A cell, with this notebook's folder, becomes a job. Everything here runs on `local_cwd`
(processes on this machine, no image, nothing to install); the same cells run on the other
schedulers with `-s SCHEDULER -cfg ...`.""",
        [],
    ),
    ("code", "%load_ext torchx_nb", []),
    (
        "md",
        """## A cell as a job

`--wait` blocks and streams the job's logs; `-o job` keeps a handle object. The job runs in this
notebook's folder, so it reads `data.csv` next to the notebook.""",
        [],
    ),
    (
        "code",
        """from pathlib import Path
Path("data.csv").write_text("x,y\\n1,2\\n3,4\\n")""",
        [],
    ),
    (
        "code",
        """%%torchx run --wait -o job --env GREETING=hello
import csv, os
rows = list(csv.DictReader(open("data.csv")))
print(os.environ["GREETING"], "from", os.environ["TORCHX_JOB_ID"])
print("sum of y:", sum(int(r["y"]) for r in rows))""",
        [],
    ),
    (
        "code",
        """print(job.status().state)
print(job.logs(), end="")""",
        [],
    ),
    (
        "md",
        """## Without `--wait` the kernel stays free

The status and log widgets update by themselves (in a frontend that shows widgets); the handle
object waits, reads logs or cancels.""",
        [],
    ),
    (
        "code",
        """%%torchx run -o slow --name slow
import time
for i in range(3):
    print("step", i, flush=True)
    time.sleep(0.5)""",
        [],
    ),
    (
        "code",
        """print("the kernel is free while", slow.handle, "runs")
print(slow.wait().state)
print(slow.logs(), end="")""",
        [],
    ),
    (
        "md",
        """## Live metrics

`--metric NAME=REGEX` picks numbers out of the log lines (the regex's first group) and the status
widget charts them live; `job.metrics()` gives them as a DataFrame. When a job ends its widgets
become a static snapshot, so this notebook still shows the job when reopened or viewed on
GitHub.""",
        [],
    ),
    (
        "code",
        """%%torchx run -o trained --metric 'loss=loss: ([0-9.]+)'
import time
for step in range(5):
    print(f"step {step} loss: {1 / (step + 1):.3f}", flush=True)
    time.sleep(0.2)""",
        [],
    ),
    (
        "code",
        """print(trained.wait().state)
trained.metrics()""",
        [],
    ),
    (
        "md",
        "## A distributed job, dry run\n\n`-j NxP` runs the cell under torchrun; `--dryrun` shows the exact request (secrets masked) and submits nothing.",
        [],
    ),
    (
        "code",
        """%%torchx run -j 2x2 --dryrun --env HF_TOKEN=hf_not_shown
import torch.distributed as dist
print(dist.get_rank())""",
        [],
    ),
    ("md", "## Components, cancel, and the job list", []),
    ("code", "%torchx run -o sleeper utils.sh -- sleep 60", []),
    (
        "code",
        """%torchx cancel sleeper
print(sleeper.wait().state)""",
        [],
    ),
    ("code", "%torchx run --wait utils.echo --msg 'hello from a component'", []),
    ("code", "%torchx list", []),
    ("md", "## Bad input is one clear line", []),
    ("code", "%%torchx run -s local_cdw\nprint(1)", ["raises-exception"]),
    ("code", "%torchx runopts local_cwd", []),
]

NOTEBOOKS["local_docker.ipynb"] = [
    (
        "md",
        """# A cell in a container: `local_docker`

The notebook's folder becomes a reproducible layer on top of the base image, the cell a small
layer on top of that; re-running an edited cell rebuilds only the cell layer. Secrets (`.env`,
`.aws/`, keys, `.git/`) never ship. Set the image and options once with `%config`.""",
        [],
    ),
    (
        "code",
        """import os
IMAGE = os.environ.get("TORCHX_NB_EXAMPLE_IMAGE", "python:3.11-slim")
%load_ext torchx_nb
%config TorchxMagics.scheduler = "local_docker"
%config TorchxMagics.image = IMAGE
%config TorchxMagics.cfg = {"local_docker": {"network": "host", "quiet": True}}""",
        [],
    ),
    (
        "code",
        """from pathlib import Path
Path("data.csv").write_text("x,y\\n1,2\\n3,4\\n")
Path(".env").write_text("API_TOKEN=stays-on-this-machine\\n")""",
        [],
    ),
    ("md", "What will ship (nothing is built):", []),
    ("code", "%torchx workspace", []),
    (
        "code",
        """%%torchx run --wait -o job
import csv, os
print("running in", os.getcwd(), "as", os.environ["TORCHX_JOB_ID"])
print("sum of y:", sum(int(r["y"]) for r in csv.DictReader(open("data.csv"))))
print(".env shipped:", os.path.exists(".env"))""",
        [],
    ),
    (
        "code",
        """%%torchx run --wait
print("an edited cell: only this small layer is new")""",
        [],
    ),
    ("code", "%torchx list -s local_docker", []),
]

NOTEBOOKS["aws_batch.ipynb"] = [
    (
        "md",
        """# A cell on AWS Batch

The cell and this folder become a patched image pushed to `image_repo` (no Docker daemon
needed: the registry builder), then a multinode Batch job: one node range per role, rank 0 gets
`TORCHX_RANK0_HOST=localhost`. Logs come from CloudWatch `/aws/batch/job`. Credentials, region
and endpoint come from the usual AWS settings (`AWS_PROFILE`, `AWS_DEFAULT_REGION`,
`AWS_ENDPOINT_URL`).""",
        [],
    ),
    (
        "code",
        """import os
QUEUE = os.environ.get("TORCHX_NB_EXAMPLE_QUEUE", "my-queue")
IMAGE = os.environ.get("TORCHX_NB_EXAMPLE_IMAGE", "REGISTRY/base:3.11")
REPO = os.environ.get("TORCHX_NB_EXAMPLE_REPO", "REGISTRY/jobs")
%load_ext torchx_nb
%config TorchxMagics.image = IMAGE
%config TorchxMagics.cfg = {"aws_batch": {"queue": QUEUE, "image_repo": REPO, "builder": "registry", "quiet": True}}""",
        [],
    ),
    (
        "code",
        """from pathlib import Path
Path("params.json").write_text('{"lr": 0.1}')""",
        [],
    ),
    ("code", "%torchx runopts aws_batch", []),
    (
        "code",
        """%%torchx run -s aws_batch -h cpu.nano --wait -o job
import json, os
print("node of", os.environ["TORCHX_ROLE_NAME"], "params", json.load(open("params.json")))""",
        [],
    ),
    ("code", """print(job.status().state, job.status().ui_url.split("#")[0])""", []),
    ("code", "%torchx list -s aws_batch", []),
]

NOTEBOOKS["aws_sagemaker.ipynb"] = [
    (
        "md",
        """# A cell as a SageMaker training job, from SageMaker Studio

In a Studio notebook nothing needs configuring: the execution role (of your space, user profile
or domain), the region and the default bucket are found the way Studio's own tools find them,
and the notebook's folder and the cell are patched onto the image without a Docker daemon and
pushed to the account's ECR repository `torchx-nb`. Only `instance_type` is yours to choose.
Secrets in the home folder (`.aws/`, `.ssh/`, tokens, histories) never ship.""",
        [],
    ),
    (
        "code",
        """import os
%load_ext torchx_nb
%config TorchxMagics.image = os.environ.get("TORCHX_NB_EXAMPLE_IMAGE", "ACCOUNT.dkr.ecr.REGION.amazonaws.com/pytorch:2")
if os.environ.get("TORCHX_NB_EXAMPLE_REPO"):  # outside Studio: your own registry
    %config TorchxMagics.cfg = {"aws_sagemaker": {"image_repo": os.environ["TORCHX_NB_EXAMPLE_REPO"], "quiet": True}}""",
        [],
    ),
    (
        "code",
        """%%torchx run -s aws_sagemaker --dryrun -j 2x1 -cfg instance_type=ml.m5.large
print("dry run: the exact CreateTrainingJob request, with the role Studio gives")""",
        [],
    ),
    (
        "code",
        """%%torchx run -s aws_sagemaker -cfg instance_type=ml.m5.large -o job
import socket
print("hello from", socket.gethostname())""",
        [],
    ),
    ("code", "print(job.status().state)", []),
    ("code", "%torchx list -s aws_sagemaker", []),
]

NOTEBOOKS["slurm.ipynb"] = [
    (
        "md",
        """# Cells on a Slurm cluster

Run this notebook on a login node (or in Open OnDemand's JupyterLab): each `%%torchx run -s slurm`
cell becomes a heterogeneous batch job, one component per replica, and runs this kernel's Python
on the nodes. With `job_dir` the notebook's folder (secrets left out) and the cell are copied into
a new job folder on the shared filesystem; without it the job runs in this folder. The status and
log widgets follow the job; `%torchx list -s slurm` reads `sacct`.""",
        [],
    ),
    (
        "code",
        """import os
from pathlib import Path
JOBS = Path(os.environ.get("TORCHX_NB_EXAMPLE_JOB_DIR", "~/torchx-jobs")).expanduser()
JOBS.mkdir(parents=True, exist_ok=True)
%load_ext torchx_nb
%config TorchxMagics.cfg = {"slurm": {"job_dir": str(JOBS), "time": "10"}}
Path("settings.py").write_text("WORLD = 'slurm'\\n")""",
        [],
    ),
    ("code", "%torchx runopts slurm", []),
    (
        "code",
        """%%torchx run -s slurm -o hello --wait
import os
from settings import WORLD
print("hello", WORLD, "from node", os.environ["SLURMD_NODENAME"], "job", os.environ["SLURM_JOB_ID"])""",
        [],
    ),
    (
        "md",
        """## Two nodes under torchrun

`-j 2x1` asks for two nodes with one process each; rank 0's node comes from
`SLURM_JOB_NODELIST_HET_GROUP_0`. Without `--wait` the kernel stays free and the widgets update
by themselves.""",
        [],
    ),
    (
        "code",
        """%%torchx run -s slurm -j 2x1 -o ddp
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: all_reduce sum {t.item()}")
dist.destroy_process_group()""",
        [],
    ),
    (
        "code",
        """print(ddp.wait().state)
for k in range(2):
    print(f"node {k}:", ddp.logs(k=k), end="")""",
        [],
    ),
    ("code", "%torchx list -s slurm", []),
]


NOTEBOOKS["gcp_batch.ipynb"] = [
    (
        "md",
        """# A cell on GCP Batch

The cell and this folder are patched onto the image without a Docker daemon and pushed to
Artifact Registry (logged in with your Application Default Credentials), then run as a GCP Batch
job: one task group, a task per replica, each with its real replica index. Logs come from Cloud
Logging. Credentials and project come from `gcloud auth application-default login` /
`GOOGLE_APPLICATION_CREDENTIALS` and `GOOGLE_CLOUD_PROJECT` (or `gcloud config set project`).""",
        [],
    ),
    (
        "code",
        """import os
PROJECT = os.environ.get("TORCHX_NB_EXAMPLE_PROJECT", "my-project")
REPO = os.environ.get("TORCHX_NB_EXAMPLE_REPO", "REGION-docker.pkg.dev/my-project/jobs")
%load_ext torchx_nb
%config TorchxMagics.image = os.environ.get("TORCHX_NB_EXAMPLE_IMAGE", "REGION-docker.pkg.dev/my-project/base/python:3.11")
from pathlib import Path
Path("params.json").write_text('{"lr": 0.1}')""",
        [],
    ),
    ("code", "%torchx runopts gcp_batch", []),
    (
        "md",
        """## What would be sent

`--dryrun` shows the exact `batch_v1.Job` and touches nothing: two H100 machines
(`a3-highgpu-8g`), one task each, eight processes per task under torchrun.""",
        [],
    ),
    (
        "code",
        """%%torchx run -s gcp_batch --dryrun -cfg project={PROJECT},image_repo={REPO},provisioning_model=spot -h gcp_a3-highgpu-8g -j 2x8
import torch.distributed as dist
dist.init_process_group("nccl")""",
        [],
    ),
    (
        "code",
        """%%torchx run -s gcp_batch -cfg project={PROJECT},image_repo={REPO},quiet=True -o job
import json, os
print("task", os.environ["BATCH_TASK_INDEX"], "of", os.environ["BATCH_TASK_COUNT"],
      "params", json.load(open("params.json")))""",
        [],
    ),
    ("code", """print(job.wait().state, job.status().ui_url.split("?")[0])
print(job.logs(), end="")""", []),
    ("code", "%torchx list -s gcp_batch", []),
]


NOTEBOOKS["kubernetes.ipynb"] = [
    (
        "md",
        """# Cells on Kubernetes

Each `%%torchx run -s kubernetes` cell becomes a Volcano job (TorchX's `vcjob`, a pod per
replica) or, with `api=indexed`, a plain `batch/v1` Indexed Job with a headless Service, for
clusters without Volcano. The notebook's folder and the cell are patched onto the image and pushed
to `image_repo` without a Docker daemon. Credentials come from your kubeconfig (`KUBECONFIG`,
`~/.kube/config`) or, inside a cluster, the pod's service account.""",
        [],
    ),
    (
        "code",
        """import os
REPO = os.environ.get("TORCHX_NB_EXAMPLE_REPO", "REGISTRY/jobs")
%load_ext torchx_nb
%config TorchxMagics.image = os.environ.get("TORCHX_NB_EXAMPLE_IMAGE", "REGISTRY/base/python:3.11")
%config TorchxMagics.cfg = {"kubernetes": {"image_repo": REPO, "builder": "registry", "quiet": True}}
from pathlib import Path
Path("params.json").write_text('{"lr": 0.1}')""",
        [],
    ),
    ("code", "%torchx runopts kubernetes", []),
    (
        "code",
        """%%torchx run -s kubernetes --dryrun -cfg api=indexed -j 2x1
print("the Indexed Job and its headless Service, as they would be created")""",
        [],
    ),
    (
        "code",
        """%%torchx run -s kubernetes -cfg queue=default -o job
import json, os
print("Volcano task index", os.environ["VC_TASK_INDEX"], "params", json.load(open("params.json")))""",
        [],
    ),
    (
        "code",
        """%%torchx run -s kubernetes -cfg api=indexed -o indexed
import os
print("completion index", os.environ["TORCHX_REPLICA_ID"], "rank 0 at", os.environ["TORCHX_RANK0_HOST"])""",
        [],
    ),
    (
        "code",
        """for h in (job, indexed):
    print(h.wait().state)
    print(h.logs(), end="")""",
        [],
    ),
    ("code", "%torchx list -s kubernetes", []),
]

NOTEBOOKS["results.ipynb"] = [
    (
        "md",
        """# Results back in the kernel

A `%%torchx run` cell's last expression is the job's result, as IPython would show it:
`job.result()` waits for the job and returns it as a Python object (cloudpickle, so classes and
lambdas defined here work). An exception in the cell is raised again here, with the job's
traceback; files written under `$TORCHX_OUTPUT_DIR` come back with `job.download()`. Everything
below runs on `local_cwd`; on the other schedulers the same cells work, with
`-cfg output_path=s3://BUCKET/PREFIX` (aws_batch, kubernetes), the default bucket (SageMaker),
`gs://` (gcp_batch, kubernetes) or the job folder (Slurm).""",
        [],
    ),
    ("code", "%load_ext torchx_nb", []),
    ("md", "## A value", []),
    (
        "code",
        """%%torchx run --wait -o job
import statistics, sys
samples = [0.9, 1.1, 1.0, 1.2, 0.8]
{"mean": statistics.mean(samples), "stdev": round(statistics.stdev(samples), 3),
 "python": sys.version_info[:2]}""",
        [],
    ),
    ("code", "job.result()", []),
    (
        "md",
        """`%torchx result` does the same from a handle (or a variable holding one), also after a
kernel restart: the job store remembers where each job keeps its outputs.""",
        [],
    ),
    ("code", "%torchx result job", []),
    (
        "md",
        """## Kernel variables in, objects out

`--push a,b` sends kernel variables into the cell's namespace (at most 64 MiB pickled). A class
defined in the notebook travels both ways.""",
        [],
    ),
    (
        "code",
        """from dataclasses import dataclass

@dataclass
class Point:
    x: float
    y: float

points = [Point(1, 2), Point(3, 4), Point(5, 6)]
scale = lambda p: Point(p.x * 10, p.y * 10)""",
        [],
    ),
    (
        "code",
        """%%torchx run --push points,scale -o moved
[scale(p) for p in points]""",
        [],
    ),
    ("code", "moved.result()", []),
    (
        "md",
        """## An exception

The cell's exception is raised here with the job's traceback above it, its line numbers those of
the cell.""",
        [],
    ),
    (
        "code",
        """%%torchx run -o broken
def ratio(a, b):
    return a / b

ratio(1, 0)""",
        [],
    ),
    ("code", "broken.result()", ["raises-exception"]),
    (
        "code",
        """try:
    broken.result()
except ZeroDivisionError as e:
    print("caught here:", type(e).__name__, e)""",
        [],
    ),
    ("md", "## Files", []),
    (
        "code",
        """%%torchx run -o writer
import json, os
out = os.environ["TORCHX_OUTPUT_DIR"]
os.makedirs(f"{out}/metrics", exist_ok=True)
for epoch in range(3):
    with open(f"{out}/metrics/epoch-{epoch}.json", "w") as f:
        json.dump({"epoch": epoch, "loss": 1 / (epoch + 1)}, f)
with open(f"{out}/model.bin", "wb") as f:
    f.write(os.urandom(1 << 20))
"wrote 4 files\"""",
        [],
    ),
    ("code", "writer.result(), writer.outputs()", []),
    (
        "code",
        """folder = writer.download()
sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())""",
        [],
    ),
    ("code", "%torchx outputs writer", []),
    (
        "md",
        """## Several processes

Under `-j NxP` every rank runs the cell; the result is rank 0's, and an exception from any rank
is reported with each failing rank's traceback.""",
        [],
    ),
    (
        "code",
        """%%torchx run -j 1x2 -o ranks
import os
f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}\"""",
        [],
    ),
    ("code", "ranks.result()", []),
    ("md", "## Bad input is one line, before anything runs", []),
    (
        "code",
        """import threading
lock = threading.Lock()""",
        [],
    ),
    ("code", "%%torchx run --push lock\nlock", ["raises-exception"]),
    ("code", "%%torchx run --push not_defined_anywhere\n1", ["raises-exception"]),
]

NOTEBOOKS["sweeps.ipynb"] = [
    (
        "md",
        """# Sweeps

`%%torchx sweep -p NAME=V1,V2 …` runs the cell once per point of the grid (the product of the
lists; `--zip` pairs them). Each point's values are plain variables in the cell (typed from
their literals: int, float, bool, str) and environment variables `TORCHX_PARAM_<NAME>`. One
widget follows every trial; `-o sw` keeps the `Sweep`: `sw.wait()`, `sw.results()` (a
DataFrame), `sw.best(metric)`, `sw.cancel()`. Here on `local_cwd`; on Slurm and AWS Batch the
trials go as one native array job.""",
        [],
    ),
    ("code", "%load_ext torchx_nb", []),
    (
        "code",
        """%%torchx sweep -p lr=0.1,0.01,0.001 -p layers=1,2 --metric 'loss=loss: ([0-9.]+)' -o sw
import math, os, time
loss = 1.0
for step in range(5):
    loss = loss * (1 - lr * 3) + 0.01 * layers
    print(f"step {step} loss: {loss:.4f}", flush=True)
    time.sleep(0.1)
{"loss": round(loss, 4), "env": os.environ["TORCHX_PARAM_LR"]}""",
        [],
    ),
    ("code", "sw.wait()\nsw.results()[['lr', 'layers', 'state', 'loss', 'result']]", []),
    ("code", "sw.best('loss')[['lr', 'layers', 'loss']]", []),
    (
        "md",
        "`--zip` pairs the lists; `--wait` blocks until every trial has ended.",
        [],
    ),
    (
        "code",
        """%%torchx sweep --zip -p a=1,2,3 -p word=one,two,three --wait -o zipped
f"{a}={word}\"""",
        [],
    ),
    ("code", "zipped.results()[['a', 'word', 'result']]", []),
    (
        "md",
        """`--max-parallel N` runs at most N trials at once; `--fail-fast` cancels the rest when one
fails (without it, a failing trial does not stop the others).""",
        [],
    ),
    (
        "code",
        """%%torchx sweep -p n=1,2,3,4,5,6 --max-parallel 2 --fail-fast -o ff
import time
time.sleep(0.5)
if n == 2:
    raise ValueError(f"trial with n={n} fails")
n * n""",
        [],
    ),
    ("code", "ff.wait()\nff.results()[['n', 'state', 'result', 'error']]", []),
    ("md", "The same from Python, with a component whose arguments take `${name}`:", []),
    (
        "code",
        """from torchx_nb.sweeps import sweep

s = sweep({"msg": ["hello", "world"]}, component="utils.echo", component_args=["--msg", "${msg}!"])
s.wait()
["".join(s.runner.log_lines(h, "echo")) for h in s.handles]""",
        [],
    ),
    ("md", "A dry run shows the grid and the request; bad grids are one line:", []),
    ("code", "%%torchx sweep --dryrun -p lr=0.1,0.2 -p flag=true,false\nprint(lr, flag)", []),
    ("code", "%%torchx sweep -p lr=0.1, -p 2x=1\nprint(lr)", ["raises-exception"]),
    ("code", "%%torchx sweep -p lr=0.1 -p lr=0.2\nprint(lr)", ["raises-exception"]),
    (
        "md",
        "After a kernel restart, `Sweep.attach` finds a sweep again in the job store:",
        [],
    ),
    (
        "code",
        """from torchx_nb.runner import Runner
from torchx_nb.sweeps import Sweep

again = Sweep.attach(Runner("torchx"), sw.id)
again""",
        [],
    ),
]


def build(cells: list[tuple[str, str, list[str]]]) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for i, (kind, source, tags) in enumerate(cells):
        cell = new_markdown_cell(source) if kind == "md" else new_code_cell(source)
        cell.id = f"cell-{i:02d}"  # stable ids: regenerating changes only what changed
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


if __name__ == "__main__":
    out_dir = Path(__file__).resolve().parent.parent / "notebooks"
    for name, cells in NOTEBOOKS.items():
        nbformat.write(build(cells), out_dir / name)
        print(f"wrote {out_dir / name}")
