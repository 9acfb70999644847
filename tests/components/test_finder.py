"""TorchX's component finder, for component authors."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchx_nb.components import utils
from torchx_nb.components.finder import (
    ComponentNotFoundException,
    get_component,
    get_components,
)


def test_get_component_and_components(tmp_path: Path) -> None:
    echo = get_component("utils.echo")
    assert echo.fn is utils.echo and echo.fn_name == "echo" and echo.validation_errors == []
    assert echo.description == "Echoes a message to stdout (calls ``echo``)."
    assert "dist.ddp" in get_components()
    comp = tmp_path / "mine.py"
    comp.write_text(
        "import torchx_nb.specs as specs\n"
        "def loose(n) -> specs.AppDef:\n"
        "    return specs.AppDef('x')\n"
    )
    found = get_component(f"{comp}:loose")
    assert found.name == f"{comp}:loose"
    assert found.validation_errors == ["Arg n missing type annotation"]
    with pytest.raises(ComponentNotFoundException):
        get_component("utils.nope")
