from __future__ import annotations

from typing import Dict, List  # noqa: UP035  (as component authors write them)

import pytest

from torchx_nb import specs
from torchx_nb.specs import BindMount, DeviceMount, VolumeMount, parse_mounts
from torchx_nb.specs.builders import ComponentArgError, materialize_appdef


def test_parse_mounts_all_types_and_aliases() -> None:
    mounts = parse_mounts(
        [
            "type=bind",
            "src=~/data",
            "dst=/data",
            "readonly",
            "type=volume",
            "source=efs-1",
            "target=/efs",
            "type=device",
            "src=/dev/fuse",
            "type=device",
            "src=/dev/a",
            "destination=/dev/b",
            "perm=rw",
        ]
    )
    import os

    assert mounts == [
        BindMount(src_path=os.path.expanduser("~/data"), dst_path="/data", read_only=True),
        VolumeMount(src="efs-1", dst_path="/efs", read_only=False),
        DeviceMount(src_path="/dev/fuse", dst_path="/dev/fuse", permissions="rwm"),
        DeviceMount(src_path="/dev/a", dst_path="/dev/b", permissions="rw"),
    ]


def test_parse_mounts_errors() -> None:
    with pytest.raises(KeyError, match="type must be specified first"):
        parse_mounts(["src=/a", "type=bind"])
    with pytest.raises(KeyError, match="unknown mount option"):
        parse_mounts(["type=bind", "colour=red"])
    with pytest.raises(ValueError, match="unknown mount type"):
        parse_mounts(["type=nfs", "src=a", "dst=b"])
    with pytest.raises(ValueError, match="each letter must be r, w or m"):
        parse_mounts(["type=device", "src=/dev/x", "perm=rwx"])


def comp(
    *args: str,
    name: str,
    n: int = 1,
    ratio: float = 0.5,
    flag: bool = False,
    items: list[str] | None = None,
    env: dict[str, str] | None = None,
    h: str | None = None,
) -> specs.AppDef:
    """A test component.

    Args:
        args: trailing args
        name: the name
        n: a count
    """
    return specs.AppDef(
        name=name,
        roles=[
            specs.Role(
                name="r",
                image="i",
                entrypoint="e",
                args=list(args),
                num_replicas=n,
                env=env or {},
                metadata={"ratio": ratio, "flag": flag, "items": items, "h": h},
            )
        ],
    )


def test_materialize_from_cli_args() -> None:
    app = materialize_appdef(
        comp,
        [
            "--name",
            "x",
            "--n",
            "3",
            "--ratio",
            "1.5",
            "--flag",
            "--items",
            "a,b",
            "--env",
            "A=1,B=2",
            "--h",
            "gpu.small",
            "pos1",
            "--pos2",
        ],
    )
    role = app.roles[0]
    assert app.name == "x" and role.num_replicas == 3
    assert role.metadata == {"ratio": 1.5, "flag": True, "items": ["a", "b"], "h": "gpu.small"}
    assert role.env == {"A": "1", "B": "2"}
    assert role.args == ["pos1", "--pos2"]


def test_materialize_from_dict_and_defaults() -> None:
    app = materialize_appdef(comp, {"name": "y", "args": ["p"]})
    assert app.name == "y" and app.roles[0].args == ["p"]
    app = materialize_appdef(comp, [], defaults={"name": "from-config", "n": "2"})
    assert app.name == "from-config" and app.roles[0].num_replicas == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: --name"),
        (["--name", "x", "--n", "two"], "invalid int value"),
        (["--name", "x", "--flag", "maybe"], "expected true or false"),
        (["--name", "x", "--env", "novalue"], "expected KEY=VALUE"),
    ],
)
def test_materialize_errors_are_clear(argv: list[str], message: str) -> None:
    with pytest.raises(ComponentArgError, match=message):
        materialize_appdef(comp, argv, prog="comp")


def test_unknown_dict_argument() -> None:
    with pytest.raises(ComponentArgError, match="unknown argument"):
        materialize_appdef(comp, {"name": "x", "nope": 1})


def test_help_comes_from_the_docstring() -> None:
    from torchx_nb.specs.builders import component_parser

    text = component_parser(comp, "comp").format_help()
    assert "A test component." in text and "a count" in text


def named_then_varargs(name: str, image: str = "img", *args: str) -> specs.AppDef:
    """A component with named parameters before ``*args``, as TorchX allows.

    Args:
        name: the name
        image: the image
        args: the program's arguments
    """
    return specs.AppDef(
        name=name, roles=[specs.Role(name="r", image=image, entrypoint="echo", args=list(args))]
    )


def test_named_parameters_before_varargs_as_in_torchx() -> None:
    app = materialize_appdef(named_then_varargs, ["--name", "n", "--image", "i", "a", "--b"])
    assert (app.name, app.roles[0].image, app.roles[0].args) == ("n", "i", ["a", "--b"])
    app = materialize_appdef(named_then_varargs, ["--name", "n", "--", "--image", "x"])
    assert (app.roles[0].image, app.roles[0].args) == ("img", ["--image", "x"])
    app = materialize_appdef(named_then_varargs, {"name": "d", "args": ["p"]})
    assert app.roles[0].args == ["p"]


def test_make_app_handle_is_importable_from_builders_as_in_torchx() -> None:
    from torchx_nb.specs.builders import make_app_handle

    assert make_app_handle("local_cwd", "torchx", "app-1") == "local_cwd://torchx/app-1"


def test_typed_list_and_dict_parameters_and_varargs_defaults_as_in_torchx() -> None:
    """``List[int]``, ``List[float]`` and ``Dict[str, int]`` elements are decoded to their
    types; a ``[component:NAME]`` default for ``*args`` is split on whitespace when no
    positional argument is given."""

    def summed(
        n: List[int],  # noqa: UP006
        w: List[float],  # noqa: UP006
        caps: Dict[str, int],  # noqa: UP006
        *args: str,
    ) -> specs.AppDef:
        total = sum(n) + sum(w) + sum(caps.values())
        return specs.AppDef(
            "sum", roles=[specs.Role("r", "i", entrypoint="echo", args=[str(total), *args])]
        )

    app = materialize_appdef(summed, ["--n", "1,2", "--w", "0.5", "--caps", "a=1,b=2"])
    assert app.roles[0].args == ["6.5"]
    app = materialize_appdef(summed, ["--n", "1", "--w", "1", "--caps", "a=1"], {"args": "a3 a4"})
    assert app.roles[0].args == ["3.0", "a3", "a4"]
    app = materialize_appdef(
        summed, ["--n", "1", "--w", "1", "--caps", "a=1", "given"], {"args": "a3 a4"}
    )
    assert app.roles[0].args == ["3.0", "given"]
    with pytest.raises(ComponentArgError, match="expected int values, got 'x'"):
        materialize_appdef(summed, ["--n", "1,x", "--w", "1", "--caps", "a=1"])
