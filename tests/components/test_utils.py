from __future__ import annotations

import pytest

from torchx_nb.components import ComponentNotFoundError, builtin_components, get_component, utils
from torchx_nb.specs import Resource


def test_echo() -> None:
    app = utils.echo(msg="hi", num_replicas=2)
    role = app.roles[0]
    assert (app.name, role.name, role.entrypoint, role.args) == ("echo", "echo", "echo", ["hi"])
    assert role.num_replicas == 2 and role.resource == Resource(cpu=1, gpu=0, memMB=1024)


def test_sh_quotes_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOGLEVEL", raising=False)
    role = utils.sh(
        "echo", "a b", "$HOME", h="cpu.small", mounts=["type=bind", "src=/a", "dst=/b"]
    ).roles[0]
    assert role.entrypoint == "sh"
    assert role.args == ["-c", "echo 'a b' '$HOME'"]
    assert role.env["LOGLEVEL"] == "WARNING"
    assert role.resource.memMB == 2048 and role.mounts[0].dst_path == "/b"  # type: ignore[union-attr]
    direct = utils.sh("a b", entrypoint="/bin/echo").roles[0]
    assert (direct.entrypoint, direct.args) == ("/bin/echo", ["a b"])


def test_python_modes() -> None:
    assert utils.python("x", m="pkg.mod").roles[0].args == ["-m", "pkg.mod", "x"]
    assert utils.python(m="pkg.mod").roles[0].env == {"HYDRA_MAIN_MODULE": "pkg.mod"}
    assert utils.python(c="print(1)").roles[0].args == ["-c", "print(1)"]
    assert utils.python(script="a.py").roles[0].args == ["a.py"]
    with pytest.raises(ValueError, match="exactly one of"):
        utils.python(m="a", c="b")


def test_lookup() -> None:
    names = builtin_components()
    assert {"utils.echo", "utils.sh", "utils.python", "dist.ddp", "cell"} <= set(names)
    assert get_component("utils.echo") is utils.echo
    with pytest.raises(ComponentNotFoundError, match="did you mean 'utils.echo'"):
        get_component("utils.ecko")


def test_lookup_from_file(tmp_path: object) -> None:
    from pathlib import Path

    f = Path(str(tmp_path)) / "comp.py"
    f.write_text(
        "from torchx_nb.components.utils import echo\n"
        "def mine(msg: str = 'x'):\n    return echo(msg=msg)\n"
    )
    assert get_component(f"{f}:mine")(msg="y").roles[0].args == ["y"]
    with pytest.raises(ComponentNotFoundError, match="has no function 'nope'.*mine"):
        get_component(f"{f}:nope")
    with pytest.raises(ComponentNotFoundError, match="does not exist"):
        get_component("missing.py:fn")
