"""GCP machine types as named resources (``gcp_a2-highgpu-8g``, ...) and the choice of a machine
type from a resource's GPU count.

GPU machines come in families whose members differ by GPU count: ``a2-highgpu`` (A100 40 GB),
``a2-ultragpu`` (A100 80 GB), ``a3-highgpu`` (H100), ``g2-standard`` (L4). A count the family has
no member for is refused with the counts it does have. Memory is taxed by 10% (``MEM_TAX``): the
VM's agents need some, and a task asking for all of it is never scheduled. Each resource carries
its machine type as ``node.kubernetes.io/instance-type`` (what GKE labels its nodes with)."""

from __future__ import annotations

from collections.abc import Callable

from torchx_nb.specs.api import InvalidRunConfigException, Resource

MEM_TAX = 0.9
GB: int = 1024
K8S_ITYPE = "node.kubernetes.io/instance-type"

# machine type: (vCPU, GPUs, memory GB)
MACHINE_TYPES: dict[str, tuple[int, int, int]] = {
    "n2-standard-4": (4, 0, 16),
    "n2-standard-8": (8, 0, 32),
    "n2-standard-16": (16, 0, 64),
    "n2-standard-32": (32, 0, 128),
    "n2-highmem-8": (8, 0, 64),
    "n2-highmem-16": (16, 0, 128),
    "c2-standard-8": (8, 0, 32),
    "c2-standard-16": (16, 0, 64),
    "c2-standard-30": (30, 0, 120),
    "c2-standard-60": (60, 0, 240),
    "a2-highgpu-1g": (12, 1, 85),
    "a2-highgpu-2g": (24, 2, 170),
    "a2-highgpu-4g": (48, 4, 340),
    "a2-highgpu-8g": (96, 8, 680),
    "a2-megagpu-16g": (96, 16, 1360),
    "a2-ultragpu-1g": (12, 1, 170),
    "a2-ultragpu-2g": (24, 2, 340),
    "a2-ultragpu-4g": (48, 4, 680),
    "a2-ultragpu-8g": (96, 8, 1360),
    "a3-highgpu-1g": (26, 1, 234),
    "a3-highgpu-2g": (52, 2, 468),
    "a3-highgpu-4g": (104, 4, 936),
    "a3-highgpu-8g": (208, 8, 1872),
    "a3-megagpu-8g": (208, 8, 1872),
    "g2-standard-4": (4, 1, 16),
    "g2-standard-8": (8, 1, 32),
    "g2-standard-12": (12, 1, 48),
    "g2-standard-16": (16, 1, 64),
    "g2-standard-24": (24, 2, 96),
    "g2-standard-32": (32, 1, 128),
    "g2-standard-48": (48, 4, 192),
    "g2-standard-96": (96, 8, 384),
}

GPU_FAMILIES = ("a2-highgpu", "a2-ultragpu", "a3-highgpu", "g2-standard")
DEFAULT_GPU_FAMILY = "a2-highgpu"


def _members(family: str) -> list[str]:
    members = [m for m in MACHINE_TYPES if m.startswith(family + "-")]
    if family == "a2-highgpu":
        members.append("a2-megagpu-16g")  # the 16-GPU A100 40 GB machine has its own name
    return members


def gpu_counts(family: str) -> list[int]:
    """The GPU counts machines of ``family`` come with."""
    return sorted({MACHINE_TYPES[m][1] for m in _members(family)})


def machine_type_for(resource: Resource, machine_type: str | None = None) -> str | None:
    """The machine type for ``resource``: ``machine_type`` when it names one, the member of the
    family ``machine_type`` names with the resource's GPU count (the smallest that fits its CPU and
    memory), the type a named resource was made for, else an ``a2-highgpu`` machine when GPUs
    are asked for. None leaves the choice to GCP Batch (CPU-only jobs)."""
    family = machine_type
    if machine_type and machine_type not in GPU_FAMILIES:
        return machine_type
    if family is None:
        itype = resource.capabilities.get(K8S_ITYPE)
        if isinstance(itype, str) and itype in MACHINE_TYPES:
            return itype
        if resource.gpu <= 0:
            return None
        family = DEFAULT_GPU_FAMILY
    counts = gpu_counts(family)
    if resource.gpu not in counts:
        listed = ", ".join(str(c) for c in counts[:-1]) + f" or {counts[-1]}"
        raise InvalidRunConfigException(
            f"{family} machines have {listed} GPUs, not {resource.gpu}: ask for one of those"
            " counts (-h NAME or --gpu), or pick another family with -cfg machine_type=",
            "machine_type",
        )
    fitting = [
        m
        for m in _members(family)
        if MACHINE_TYPES[m][1] == resource.gpu
        and MACHINE_TYPES[m][0] >= resource.cpu
        and MACHINE_TYPES[m][2] * GB * MEM_TAX >= resource.memMB
    ]
    if not fitting:
        raise InvalidRunConfigException(
            f"no {family} machine with {resource.gpu} GPUs has {resource.cpu} vCPUs and"
            f" {resource.memMB} MB: ask for less CPU or memory, or name a machine type",
            "machine_type",
        )
    return min(fitting, key=lambda m: MACHINE_TYPES[m][0])


def _factory(mtype: str, cpu: int, gpu: int, mem: int) -> Callable[[], Resource]:
    def make() -> Resource:
        return Resource(
            cpu=cpu, gpu=gpu, memMB=int(mem * GB * MEM_TAX), capabilities={K8S_ITYPE: mtype}
        )

    make.__name__ = make.__qualname__ = "gcp_" + mtype.replace("-", "_")
    make.__doc__ = f"A Resource for one {mtype} machine."
    return make


NAMED_RESOURCES: dict[str, Callable[[], Resource]] = {
    f"gcp_{mtype}": _factory(mtype, *spec) for mtype, spec in MACHINE_TYPES.items()
}
