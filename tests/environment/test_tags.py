"""Which wheel tags an image accepts: its CPython, its CPU, manylinux at or below its glibc
(musllinux on musl); never a host-built ``linux_x86_64``."""

from __future__ import annotations

from torchx_nb.environment.tags import fitting
from torchx_nb.workspace.image_contents import ImageContents


def _image(python: str = "3.11", glibc: str | None = "2.36", libc: str = "glibc") -> ImageContents:
    return ImageContents(python, "/usr", (), {}, "x86_64", libc, glibc)


def test_manylinux_at_or_below_the_image_s_glibc_and_its_python_fit() -> None:
    tags = [
        "cp311-cp311-manylinux_2_39_x86_64",
        "cp311-cp311-manylinux_2_17_x86_64",
        "cp311-cp311-manylinux2014_x86_64",
        "cp311-cp311-linux_x86_64",
        "cp312-cp312-manylinux_2_17_x86_64",
        "cp311-cp311-manylinux_2_17_aarch64",
        "cp311-abi3-manylinux_2_28_x86_64",
        "py3-none-any",
    ]
    assert fitting(tags, _image()) == [
        "cp311-cp311-manylinux_2_17_x86_64",
        "cp311-cp311-manylinux2014_x86_64",
        "cp311-abi3-manylinux_2_28_x86_64",
        "py3-none-any",
    ]
    assert fitting(["cp311-cp311-manylinux_2_28_x86_64"], _image(glibc="2.27")) == []
    assert fitting(["cp311-cp311-musllinux_1_1_x86_64"], _image(libc="musl")) == [
        "cp311-cp311-musllinux_1_1_x86_64"
    ]
    assert fitting(["cp311-cp311-manylinux_2_17_x86_64"], _image(libc="musl")) == []
