"""Named devices of a Resource (``Resource.devices``, e.g. ``{"vpc.amazonaws.com/efa": 4}``) as the
host device files a container needs, as TorchX maps them for Docker and AWS Batch."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

from torchx_nb.specs.api import DeviceMount
from torchx_nb.specs.named_resources_aws import EFA_DEVICE, NEURON_DEVICE


def _numbered(prefix: str) -> Callable[[int], list[DeviceMount]]:
    def mounts(count: int) -> list[DeviceMount]:
        return [DeviceMount(src_path=f"{prefix}{i}", dst_path=f"{prefix}{i}") for i in range(count)]

    return mounts


DEVICES: Mapping[str, Callable[[int], list[DeviceMount]]] = {
    EFA_DEVICE: _numbered("/dev/infiniband/uverbs"),
    NEURON_DEVICE: _numbered("/dev/neuron"),
}


def get_device_mounts(devices: Mapping[str, int]) -> list[DeviceMount]:
    """One DeviceMount per device file (``/dev/infiniband/uverbs0..N-1``, ``/dev/neuron0..N-1``);
    a device name with no known mapping is skipped with a warning."""
    out: list[DeviceMount] = []
    for name, count in devices.items():
        make = DEVICES.get(name)
        if make is None:
            warnings.warn(f"no device files known for {name!r}; it is not mounted", stacklevel=2)
            continue
        out += make(count)
    return out
