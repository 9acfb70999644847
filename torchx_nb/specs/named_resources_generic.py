"""Cloud-neutral t-shirt sizes (``cpu.small``, ``gpu.large``, ...), as in TorchX."""

from __future__ import annotations

from collections.abc import Callable

from torchx_nb.specs.api import Resource

GiB: int = 1024

_SIZES: dict[str, tuple[int, int, int]] = {
    "gpu.small": (8, 1, 32 * GiB),
    "gpu.medium": (16, 2, 64 * GiB),
    "gpu.large": (32, 4, 128 * GiB),
    "gpu.xlarge": (64, 8, 256 * GiB),
    "cpu.nano": (1, 0, 512),
    "cpu.micro": (1, 0, 1 * GiB),
    "cpu.small": (1, 0, 2 * GiB),
    "cpu.medium": (2, 0, 4 * GiB),
    "cpu.large": (2, 0, 8 * GiB),
    "cpu.xlarge": (8, 0, 32 * GiB),
}


def _factory(cpu: int, gpu: int, mem: int) -> Callable[[], Resource]:
    return lambda: Resource(cpu=cpu, gpu=gpu, memMB=mem)


NAMED_RESOURCES: dict[str, Callable[[], Resource]] = {
    name: _factory(*spec) for name, spec in _SIZES.items()
}
