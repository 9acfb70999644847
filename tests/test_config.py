from __future__ import annotations

import io
from pathlib import Path

import pytest

from torchx_nb import config
from torchx_nb.specs import InvalidRunConfigException, runopts


def opts() -> runopts:
    o = runopts()
    o.add("queue", type_=str, help="the queue", required=True)
    o.add("n", type_=int, help="count", default=1)
    o.add("on", type_=bool, help="flag", default=False)
    o.add("tags", type_=list[str], help="tags")
    o.add("labels", type_=dict[str, str], help="labels")
    return o


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("TORCHXCONFIG", raising=False)
    return home, cwd


def test_lookup_order_and_precedence(homes: tuple[Path, Path]) -> None:
    home, cwd = homes
    (home / ".torchxconfig").write_text("[s]\nqueue = from-home\n")
    (cwd / ".torchxconfig").write_text(
        "[s]\nqueue = from-cwd\nn = 5\non = True\ntags = a;b\nlabels = k:v;x:y\nbogus = 1\n"
    )
    assert config.find_configs() == [str(home / ".torchxconfig"), str(cwd / ".torchxconfig")]
    with pytest.warns(UserWarning, match="unknown option 'bogus'"):
        cfg = config.apply_runopts("s", {"n": 9}, opts())
    assert cfg == {
        "n": 9,
        "queue": "from-home",
        "on": True,
        "tags": ["a", "b"],
        "labels": {"k": "v", "x": "y"},
    }


def test_torchxconfig_env_wins_alone(
    homes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = homes
    (home / ".torchxconfig").write_text("[s]\nqueue = from-home\n")
    explicit = tmp_path / "explicit.ini"
    explicit.write_text("[s]\nqueue = explicit\n")
    monkeypatch.setenv("TORCHXCONFIG", str(explicit))
    assert config.apply_runopts("s", {}, opts()) == {"queue": "explicit"}
    monkeypatch.setenv("TORCHXCONFIG", "")
    assert config.find_configs() == []
    monkeypatch.setenv("TORCHXCONFIG", str(tmp_path / "missing"))
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.find_configs()


def test_bad_values_and_files(homes: tuple[Path, Path]) -> None:
    _, cwd = homes
    (cwd / ".torchxconfig").write_text("[s]\nn = many\n")
    with pytest.raises(InvalidRunConfigException, match=r"\[s\] n = 'many'"):
        config.apply_runopts("s", {}, opts())
    (cwd / ".torchxconfig").write_text("not an ini file")
    with pytest.raises(config.ConfigError, match="cannot parse"):
        config.apply_runopts("s", {}, opts())


def test_component_and_cli_sections(homes: tuple[Path, Path]) -> None:
    _, cwd = homes
    (cwd / ".torchxconfig").write_text(
        "[component:utils.echo]\nmsg = configured\n\n[cli:run]\nscheduler = local_cwd\n"
    )
    assert config.component_defaults("utils.echo") == {"msg": "configured"}
    assert config.cli_defaults("run") == {"scheduler": "local_cwd"}


def test_dump_template() -> None:
    buf = io.StringIO()
    config.dump_runopts(buf, {"s": opts()})
    text = buf.getvalue()
    assert "[s]\nqueue = #FIXME:(str) the queue\nn = 1\non = False\n" in text
    buf = io.StringIO()
    config.dump_runopts(buf, {"s": opts()}, required_only=True)
    assert "n = 1" not in buf.getvalue()


# TorchX 0.7.0's ``torchx.runner.config`` API, same signatures and return types.


def _write_plugin_config(cwd: Path) -> None:
    (cwd / ".torchxconfig").write_text(
        "[local_cwd]\nlog_dir = /tmp/logs\nprepend_cwd = True\n\n"
        "[component:dist.ddp]\nj = 1x2\nimage = img:1\n\n"
        "[component:utils.echo]\nmsg = hi\n\n"
        "[:bad]\nx = 1\n"
    )


def test_torchx_apply_load_and_sections(homes: tuple[Path, Path]) -> None:
    home, cwd = homes
    _write_plugin_config(cwd)
    (home / ".torchxconfig").write_text("[component:dist.ddp]\nj = 9x9\nm = mod\n")
    cfg: dict[str, object] = {"log_dir": "/given"}
    assert config.apply("local_cwd", cfg) is None  # type: ignore[func-returns-value]
    assert cfg == {"log_dir": "/given", "prepend_cwd": True}
    cfg = {}
    config.apply("local_cwd", cfg, dirs=[str(cwd)])
    assert cfg == {"log_dir": "/tmp/logs", "prepend_cwd": True}

    loaded: dict[str, object] = {}
    config.load("local_cwd", io.StringIO("[local_cwd]\nprepend_cwd = False\n"), loaded)
    assert loaded == {"prepend_cwd": False}

    assert config.load_sections("component") == {
        "dist.ddp": {"j": "9x9", "m": "mod", "image": "img:1"},
        "utils.echo": {"msg": "hi"},
    }
    assert config.get_configs("component", "utils.echo") == {"msg": "hi"}
    assert config.get_configs("component", "nope") == {}
    assert config.get_config("component", "dist.ddp", "j") == "9x9"
    assert config.get_config("component", "dist.ddp", "nope") is None
    assert config.get_config("cli", "dist.ddp", "j") is None
    assert config.find_configs() == [str(home / ".torchxconfig"), str(cwd / ".torchxconfig")]
    assert config.find_configs([str(cwd)]) == [str(cwd / ".torchxconfig")]


def test_torchx_find_configs_missing_file_is_file_not_found(
    homes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHXCONFIG", str(tmp_path / "missing.ini"))
    with pytest.raises(FileNotFoundError):
        config.find_configs()


def test_torchx_dump_by_scheduler_name() -> None:
    buf = io.StringIO()
    config.dump(buf, ["local_cwd"])
    text = buf.getvalue()
    assert text.startswith("[local_cwd]\n")
    assert "log_dir = None\n" in text and "prepend_cwd = False\n" in text
    buf = io.StringIO()
    config.dump(buf, ["local_cwd"], required_only=True)
    assert buf.getvalue() == "[local_cwd]\n\n"
    with pytest.raises(ValueError, match="not a registered scheduler"):
        config.dump(io.StringIO(), ["nope"])
    # the round trip: what dump writes, load reads back to the defaults
    cfg: dict[str, object] = {}
    config.load("local_cwd", io.StringIO(text), cfg)
    assert cfg == {
        "max_preemptions": 20,
        "prepend_cwd": False,
        "auto_set_cuda_visible_devices": False,
    }


def test_placeholder_is_truncated_as_in_torchx() -> None:
    o = runopts()
    o.add("queue", type_=str, help="a very long help text " * 5, required=True)
    buf = io.StringIO()
    config.dump_runopts(buf, {"s": o})
    line = buf.getvalue().splitlines()[1]
    assert line.startswith("queue = #FIXME:(str) a very long help")
    assert line.endswith("...") and len(line) == len("queue = ") + 63


def test_default_config_dirs_is_honoured_once_set(
    homes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Setting ``config.DEFAULT_CONFIG_DIRS`` (TorchX's public list) chooses the folders; left
    as imported, home and the current folder are read as they are at each call."""
    home, cwd = homes
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for folder in (home, cwd, elsewhere):
        (folder / ".torchxconfig").write_text(f"[s]\nqueue = {folder.name}\n")
    assert config.find_configs() == [str(home / ".torchxconfig"), str(cwd / ".torchxconfig")]
    monkeypatch.chdir(elsewhere)  # a notebook's %cd: the new current folder is read
    assert config.find_configs()[-1] == str(elsewhere / ".torchxconfig")
    monkeypatch.setattr(config, "DEFAULT_CONFIG_DIRS", [str(cwd)])
    assert config.find_configs() == [str(cwd / ".torchxconfig")]
    assert config.apply_runopts("s", {}, opts()) == {"queue": "cwd"}
