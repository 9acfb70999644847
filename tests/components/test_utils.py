from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli
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


def test_torchx_utility_components_have_torchx_parameters() -> None:
    touch = utils.touch("/tmp/f").roles[0]
    assert (touch.name, touch.entrypoint, touch.args) == ("touch", "touch", ["/tmp/f"])
    binary = utils.binary("-l", "a", entrypoint="/bin/ls", num_replicas=2)
    role = binary.roles[0]
    assert (binary.name, role.name, role.image, role.entrypoint) == (
        "torchx_utils_binary",
        "binary",
        "<NONE>",
        "/bin/ls",
    )
    assert role.args == ["-l", "a"] and role.num_replicas == 2
    assert utils.binary(entrypoint="x", h="cpu.small").roles[0].resource.memMB == 2048
    copy = utils.copy("s3://a/b", "/tmp/c")
    assert copy.name == "torchx-utils-copy"
    assert copy.roles[0].args == [
        "-m",
        "torchx_nb.apps.copy_main",
        "--src",
        "s3://a/b",
        "--dst",
        "/tmp/c",
    ]
    booth = utils.booth(1, 2.5, trial_idx=3, tracker_base="memory://t")
    assert booth.roles[0].args[-8:] == [
        "--x1",
        "1",
        "--x2",
        "2.5",
        "--trial_idx",
        "3",
        "--tracker_base",
        "memory://t",
    ]


def test_helpers_in_component_modules_are_not_components() -> None:
    names = builtin_components()
    assert {"utils.touch", "utils.binary", "utils.copy", "utils.booth", "dist.spmd"} <= set(names)
    for helper in ("dist.parse_nnodes", "dist.parse_name", "dist.torchrun_command"):
        assert helper not in names
        with pytest.raises(ComponentNotFoundError):
            get_component(helper)


def test_run_help_and_builtins_list_every_component() -> None:
    code, out, err = cli("run", "--help")
    assert code == 0, err
    listing = out[out.index("built-in components:") :]
    for name in ("utils.touch", "utils.binary", "utils.copy", "utils.booth", "dist.spmd"):
        assert f"\n  {name} " in listing
    assert "parse_nnodes" not in out
    code, out2, _ = cli("builtins")
    assert code == 0 and out2.strip() == listing.strip()


def test_missing_component_argument_exits_2_as_argparse_does() -> None:
    code, _, err = cli("run", "--dryrun", "utils.touch")
    assert code == 2
    assert err.strip() == (
        "torchx-nb: error: torchx-nb run utils.touch: the following arguments are required:"
        " --file (see `torchx-nb run utils.touch --help`)"
    )


def test_copy_touch_binary_and_booth_run_on_local_cwd(tmp_path: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_text("payload\n")
    dst = tmp_path / "out" / "dst.txt"
    touched = tmp_path / "touched"
    tracker = tmp_path / "tracker"
    for args in (
        ["utils.copy", "--src", str(src), "--dst", str(dst)],
        ["utils.touch", "--file", str(touched)],
        ["utils.binary", "--entrypoint", "sh", "--", "-c", f"echo bin > {tmp_path}/bin.txt"],
        [
            "utils.booth",
            "--x1",
            "1",
            "--x2",
            "3",
            "--trial_idx",
            "7",
            "--tracker_base",
            str(tracker),
        ],
    ):
        code, out, err = cli("run", "--workspace", "", "-s", "local_cwd", "--wait", *args)
        assert code == 0, (args, out, err)
        assert "SUCCEEDED" in err, err
    assert dst.read_text() == "payload\n"
    assert touched.exists()
    assert (tmp_path / "bin.txt").read_text() == "bin\n"
    assert json.loads((tracker / "7").read_text()) == {"booth_eval": 0.0}
