"""AWS instance types as named resources (``aws_p4d.24xlarge``, ...).

Memory is taxed by 4% (``MEM_TAX``): AWS Batch enforces hard memory limits and a job asking for an
instance's full memory sits RUNNABLE forever. Each resource carries its instance type as the
``node.kubernetes.io/instance-type`` capability, which AWS Batch and Kubernetes read back."""

from __future__ import annotations

from collections.abc import Callable

from torchx_nb.specs.api import Resource

MEM_TAX = 0.96
GiB: int = int(1024 * MEM_TAX)
K8S_ITYPE = "node.kubernetes.io/instance-type"
EFA_DEVICE = "vpc.amazonaws.com/efa"
NEURON_DEVICE = "aws.amazon.com/neurondevice"

# name: (cpu, gpu, mem GiB, efa devices, neuron devices)
_TYPES: dict[str, tuple[int, int, int, int, int]] = {
    "t3.medium": (2, 0, 4, 0, 0),
    "m5.xlarge": (4, 0, 16, 0, 0),
    "m5.2xlarge": (8, 0, 32, 0, 0),
    "m5.4xlarge": (16, 0, 64, 0, 0),
    "m5.8xlarge": (32, 0, 128, 0, 0),
    "m5.12xlarge": (48, 0, 192, 0, 0),
    "m5.16xlarge": (64, 0, 256, 0, 0),
    "m5.24xlarge": (96, 0, 384, 0, 0),
    "c5.xlarge": (4, 0, 8, 0, 0),
    "c5.2xlarge": (8, 0, 16, 0, 0),
    "c5.4xlarge": (16, 0, 32, 0, 0),
    "c5.9xlarge": (36, 0, 72, 0, 0),
    "c5.12xlarge": (48, 0, 96, 0, 0),
    "c5.18xlarge": (72, 0, 144, 0, 0),
    "c5.24xlarge": (96, 0, 192, 0, 0),
    "p3.2xlarge": (8, 1, 61, 0, 0),
    "p3.8xlarge": (32, 4, 244, 0, 0),
    "p3.16xlarge": (64, 8, 488, 0, 0),
    "p3dn.24xlarge": (96, 8, 768, 1, 0),
    "p4d.24xlarge": (96, 8, 1152, 4, 0),
    "p4de.24xlarge": (96, 8, 1152, 4, 0),
    "p5.48xlarge": (192, 8, 2048, 32, 0),
    "p5en.48xlarge": (192, 8, 2048, 16, 0),
    "g4dn.xlarge": (4, 1, 16, 0, 0),
    "g4dn.2xlarge": (8, 1, 32, 0, 0),
    "g4dn.4xlarge": (16, 1, 64, 0, 0),
    "g4dn.8xlarge": (32, 1, 128, 1, 0),
    "g4dn.12xlarge": (48, 4, 192, 1, 0),
    "g4dn.16xlarge": (64, 1, 256, 1, 0),
    "g4dn.metal": (96, 8, 384, 1, 0),
    "g5.xlarge": (4, 1, 16, 0, 0),
    "g5.2xlarge": (8, 1, 32, 0, 0),
    "g5.4xlarge": (16, 1, 64, 0, 0),
    "g5.8xlarge": (32, 1, 128, 1, 0),
    "g5.12xlarge": (48, 4, 192, 1, 0),
    "g5.16xlarge": (64, 1, 256, 1, 0),
    "g5.24xlarge": (96, 4, 384, 1, 0),
    "g5.48xlarge": (192, 8, 768, 1, 0),
    "g6e.xlarge": (4, 1, 32, 0, 0),
    "g6e.2xlarge": (8, 1, 64, 0, 0),
    "g6e.4xlarge": (16, 1, 128, 0, 0),
    "g6e.8xlarge": (32, 1, 256, 1, 0),
    "g6e.12xlarge": (48, 4, 384, 1, 0),
    "g6e.16xlarge": (64, 1, 512, 1, 0),
    "g6e.24xlarge": (96, 4, 768, 2, 0),
    "g6e.48xlarge": (192, 8, 1536, 4, 0),
    "trn1.2xlarge": (8, 0, 32, 0, 1),
    "trn1.32xlarge": (128, 0, 512, 8, 16),
    "inf2.xlarge": (4, 0, 16, 0, 1),
    "inf2.8xlarge": (32, 0, 128, 0, 1),
    "inf2.24xlarge": (96, 0, 384, 0, 6),
    "inf2.48xlarge": (192, 0, 768, 0, 12),
}


def _factory(
    itype: str, cpu: int, gpu: int, mem: int, efa: int, neuron: int
) -> Callable[[], Resource]:
    def make() -> Resource:
        devices: dict[str, int] = {}
        if efa:
            devices[EFA_DEVICE] = efa
        if neuron:
            devices[NEURON_DEVICE] = neuron
        return Resource(
            cpu=cpu,
            gpu=gpu,
            memMB=mem * GiB,
            capabilities={K8S_ITYPE: itype},
            devices=devices,
        )

    make.__name__ = make.__qualname__ = "aws_" + itype.replace(".", "_")
    make.__doc__ = f"A Resource for one {itype} instance."
    return make


NAMED_RESOURCES: dict[str, Callable[[], Resource]] = {
    f"aws_{itype}": _factory(itype, *spec) for itype, spec in _TYPES.items()
}

# TorchX names each factory after its instance type (``aws_p4d_24xlarge()``).
aws_t3_medium = NAMED_RESOURCES["aws_t3.medium"]
aws_m5_xlarge = NAMED_RESOURCES["aws_m5.xlarge"]
aws_m5_2xlarge = NAMED_RESOURCES["aws_m5.2xlarge"]
aws_m5_4xlarge = NAMED_RESOURCES["aws_m5.4xlarge"]
aws_m5_8xlarge = NAMED_RESOURCES["aws_m5.8xlarge"]
aws_m5_12xlarge = NAMED_RESOURCES["aws_m5.12xlarge"]
aws_m5_16xlarge = NAMED_RESOURCES["aws_m5.16xlarge"]
aws_m5_24xlarge = NAMED_RESOURCES["aws_m5.24xlarge"]
aws_c5_xlarge = NAMED_RESOURCES["aws_c5.xlarge"]
aws_c5_2xlarge = NAMED_RESOURCES["aws_c5.2xlarge"]
aws_c5_4xlarge = NAMED_RESOURCES["aws_c5.4xlarge"]
aws_c5_9xlarge = NAMED_RESOURCES["aws_c5.9xlarge"]
aws_c5_12xlarge = NAMED_RESOURCES["aws_c5.12xlarge"]
aws_c5_18xlarge = NAMED_RESOURCES["aws_c5.18xlarge"]
aws_c5_24xlarge = NAMED_RESOURCES["aws_c5.24xlarge"]
aws_p3_2xlarge = NAMED_RESOURCES["aws_p3.2xlarge"]
aws_p3_8xlarge = NAMED_RESOURCES["aws_p3.8xlarge"]
aws_p3_16xlarge = NAMED_RESOURCES["aws_p3.16xlarge"]
aws_p3dn_24xlarge = NAMED_RESOURCES["aws_p3dn.24xlarge"]
aws_p4d_24xlarge = NAMED_RESOURCES["aws_p4d.24xlarge"]
aws_p4de_24xlarge = NAMED_RESOURCES["aws_p4de.24xlarge"]
aws_p5_48xlarge = NAMED_RESOURCES["aws_p5.48xlarge"]
aws_p5en_48xlarge = NAMED_RESOURCES["aws_p5en.48xlarge"]
aws_g4dn_xlarge = NAMED_RESOURCES["aws_g4dn.xlarge"]
aws_g4dn_2xlarge = NAMED_RESOURCES["aws_g4dn.2xlarge"]
aws_g4dn_4xlarge = NAMED_RESOURCES["aws_g4dn.4xlarge"]
aws_g4dn_8xlarge = NAMED_RESOURCES["aws_g4dn.8xlarge"]
aws_g4dn_12xlarge = NAMED_RESOURCES["aws_g4dn.12xlarge"]
aws_g4dn_16xlarge = NAMED_RESOURCES["aws_g4dn.16xlarge"]
aws_g4dn_metal = NAMED_RESOURCES["aws_g4dn.metal"]
aws_g5_xlarge = NAMED_RESOURCES["aws_g5.xlarge"]
aws_g5_2xlarge = NAMED_RESOURCES["aws_g5.2xlarge"]
aws_g5_4xlarge = NAMED_RESOURCES["aws_g5.4xlarge"]
aws_g5_8xlarge = NAMED_RESOURCES["aws_g5.8xlarge"]
aws_g5_12xlarge = NAMED_RESOURCES["aws_g5.12xlarge"]
aws_g5_16xlarge = NAMED_RESOURCES["aws_g5.16xlarge"]
aws_g5_24xlarge = NAMED_RESOURCES["aws_g5.24xlarge"]
aws_g5_48xlarge = NAMED_RESOURCES["aws_g5.48xlarge"]
aws_g6e_xlarge = NAMED_RESOURCES["aws_g6e.xlarge"]
aws_g6e_2xlarge = NAMED_RESOURCES["aws_g6e.2xlarge"]
aws_g6e_4xlarge = NAMED_RESOURCES["aws_g6e.4xlarge"]
aws_g6e_8xlarge = NAMED_RESOURCES["aws_g6e.8xlarge"]
aws_g6e_12xlarge = NAMED_RESOURCES["aws_g6e.12xlarge"]
aws_g6e_16xlarge = NAMED_RESOURCES["aws_g6e.16xlarge"]
aws_g6e_24xlarge = NAMED_RESOURCES["aws_g6e.24xlarge"]
aws_g6e_48xlarge = NAMED_RESOURCES["aws_g6e.48xlarge"]
aws_trn1_2xlarge = NAMED_RESOURCES["aws_trn1.2xlarge"]
aws_trn1_32xlarge = NAMED_RESOURCES["aws_trn1.32xlarge"]
aws_inf2_xlarge = NAMED_RESOURCES["aws_inf2.xlarge"]
aws_inf2_8xlarge = NAMED_RESOURCES["aws_inf2.8xlarge"]
aws_inf2_24xlarge = NAMED_RESOURCES["aws_inf2.24xlarge"]
aws_inf2_48xlarge = NAMED_RESOURCES["aws_inf2.48xlarge"]


def instance_shape(instance_type: str) -> tuple[int, int, int] | None:
    """(vCPUs, GPUs, memory MiB) of an instance type this table knows; None otherwise."""
    found = _TYPES.get(instance_type)
    if found is None:
        return None
    cpu, gpu, mem_gib, _, _ = found
    return cpu, gpu, mem_gib * 1024


def instance_type_from_resource(resource: Resource) -> str | None:
    """The AWS instance type a named resource was made for, if any."""
    value = resource.capabilities.get(K8S_ITYPE)
    return str(value) if value else None
