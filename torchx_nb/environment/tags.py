"""Whether a compiled distribution the kernel has can load on an image: its wheel tags (the
installed ``WHEEL`` file's) against the tags the image's Python and libc accept, as
``packaging.tags`` computes them: the image's CPython version, its CPU, and manylinux at or
below its glibc (musllinux for a musl image). A host-built ``linux_x86_64`` wheel fits no
image: nothing says which glibc it needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.tags import Tag

    from torchx_nb.workspace.image_contents import ImageContents


def _platforms(contents: ImageContents) -> list[str]:
    arch = contents.arch
    if contents.libc == "musl":
        return [f"musllinux_1_{minor}_{arch}" for minor in range(2, -1, -1)]
    major, _, minor = (contents.glibc or "2.17").partition(".")
    top = int(minor) if major == "2" and minor.isdigit() else 17
    out = []
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    for m in range(top, 4, -1):
        out.append(f"manylinux_2_{m}_{arch}")
        if m in legacy:
            out.append(f"{legacy[m]}_{arch}")
    return out


def image_tags(contents: ImageContents) -> frozenset[Tag]:
    """Every wheel tag the image's Python accepts."""
    from packaging.tags import compatible_tags, cpython_tags

    assert contents.python is not None
    major, minor = (int(x) for x in contents.python.split("."))
    platforms = _platforms(contents)
    return frozenset(
        [
            *cpython_tags((major, minor), platforms=platforms),
            *compatible_tags((major, minor), platforms=platforms),
        ]
    )


def parse_tags(lines: Iterable[str]) -> frozenset[Tag]:
    """The tags a ``WHEEL`` file's ``Tag:`` lines (or a wheel's file-name tags) name."""
    from packaging.tags import parse_tag

    out: set[Tag] = set()
    for line in lines:
        try:
            out |= parse_tag(line.strip())
        except ValueError:
            continue
    return frozenset(out)


def fitting(tags: Iterable[str], contents: ImageContents) -> list[str]:
    """Those of ``tags`` (``cp311-cp311-manylinux_2_17_x86_64`` …) the image accepts."""
    accepted = image_tags(contents)
    return [t for t in tags if parse_tags([t]) & accepted]
