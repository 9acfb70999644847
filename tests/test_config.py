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
    assert config.find_configs() == [home / ".torchxconfig", cwd / ".torchxconfig"]
    with pytest.warns(UserWarning, match="unknown option 'bogus'"):
        cfg = config.apply("s", {"n": 9}, opts())
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
    assert config.apply("s", {}, opts()) == {"queue": "explicit"}
    monkeypatch.setenv("TORCHXCONFIG", "")
    assert config.find_configs() == []
    monkeypatch.setenv("TORCHXCONFIG", str(tmp_path / "missing"))
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.find_configs()


def test_bad_values_and_files(homes: tuple[Path, Path]) -> None:
    _, cwd = homes
    (cwd / ".torchxconfig").write_text("[s]\nn = many\n")
    with pytest.raises(InvalidRunConfigException, match=r"\[s\] n = 'many'"):
        config.apply("s", {}, opts())
    (cwd / ".torchxconfig").write_text("not an ini file")
    with pytest.raises(config.ConfigError, match="cannot parse"):
        config.apply("s", {}, opts())


def test_component_and_cli_sections(homes: tuple[Path, Path]) -> None:
    _, cwd = homes
    (cwd / ".torchxconfig").write_text(
        "[component:utils.echo]\nmsg = configured\n\n[cli:run]\nscheduler = local_cwd\n"
    )
    assert config.component_defaults("utils.echo") == {"msg": "configured"}
    assert config.cli_defaults("run") == {"scheduler": "local_cwd"}


def test_dump_template() -> None:
    buf = io.StringIO()
    config.dump(buf, {"s": opts()})
    text = buf.getvalue()
    assert "[s]\nqueue = #FIXME:(str) the queue\nn = 1\non = False\n" in text
    buf = io.StringIO()
    config.dump(buf, {"s": opts()}, required_only=True)
    assert "n = 1" not in buf.getvalue()
