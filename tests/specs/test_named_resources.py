from __future__ import annotations

import pytest

from torchx_nb import specs
from torchx_nb.specs import named_resources
from torchx_nb.specs.named_resources_aws import EFA_DEVICE, K8S_ITYPE, instance_type_from_resource


def test_generic_sizes() -> None:
    assert named_resources["gpu.small"] == specs.Resource(cpu=8, gpu=1, memMB=32 * 1024)
    assert named_resources["cpu.nano"].memMB == 512
    assert named_resources["gpu.xlarge"].gpu == 8


def test_aws_types_apply_the_memory_tax_and_capabilities() -> None:
    r = named_resources["aws_p4d.24xlarge"]
    assert (r.cpu, r.gpu) == (96, 8)
    assert r.memMB == 1152 * int(1024 * 0.96)
    assert r.capabilities[K8S_ITYPE] == "p4d.24xlarge"
    assert r.devices[EFA_DEVICE] == 4
    assert instance_type_from_resource(r) == "p4d.24xlarge"
    assert named_resources["aws_trn1.32xlarge"].devices["aws.amazon.com/neurondevice"] == 16


def test_each_lookup_returns_a_fresh_object() -> None:
    a = named_resources["gpu.small"]
    a.capabilities["x"] = 1
    assert named_resources["gpu.small"].capabilities == {}


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(KeyError) as info:
        named_resources["gpu.smal"]
    assert "did you mean 'gpu.small'" in str(info.value)
    assert isinstance(info.value, specs.TorchxNbError)
    assert "gpu.small" in named_resources and "nope" not in named_resources


def test_resource_helper() -> None:
    assert specs.resource() == specs.Resource(cpu=2, gpu=0, memMB=1024)
    assert specs.resource(cpu=4, memMB=10) == specs.Resource(cpu=4, gpu=0, memMB=10)
    assert specs.resource(h="cpu.small") == named_resources["cpu.small"]
    assert named_resources["NULL"] == specs.NULL_RESOURCE


def test_aws_factory_functions_exist_as_in_torchx() -> None:
    from torchx_nb.specs import named_resources_aws as aws

    p4d = aws.aws_p4d_24xlarge()
    assert (p4d.cpu, p4d.gpu, p4d.memMB) == (96, 8, 1152 * aws.GiB)
    assert p4d.devices == {aws.EFA_DEVICE: 4}
    assert p4d.capabilities == {aws.K8S_ITYPE: "p4d.24xlarge"}
    assert aws.aws_trn1_32xlarge().devices == {aws.EFA_DEVICE: 8, aws.NEURON_DEVICE: 16}
    assert aws.aws_t3_medium().memMB == 4 * aws.GiB
    for name, factory in aws.NAMED_RESOURCES.items():
        fn = getattr(aws, name.replace(".", "_"))
        assert fn is factory and fn.__name__ == name.replace(".", "_")
        assert fn() == factory() and fn() is not fn()
