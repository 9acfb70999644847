from __future__ import annotations

import datetime
import json
import typing

import pytest

from torchx_nb import specs
from torchx_nb.specs import (
    AppDef,
    AppDryRunInfo,
    AppState,
    AppStatus,
    InvalidRunConfigException,
    MalformedAppHandleException,
    ReplicaStatus,
    Resource,
    Role,
    RoleStatus,
    macros,
    runopts,
)


def test_resource_copy_merges_capabilities_and_drops_tags() -> None:
    r = Resource(cpu=2, gpu=1, memMB=100, capabilities={"a": 1}, tags={"t": 1})
    c = Resource.copy(r, b=2)
    assert c.capabilities == {"a": 1, "b": 2}
    assert c.tags == {}
    assert r.capabilities == {"a": 1}


def test_role_defaults_match_torchx() -> None:
    role = Role(name="r", image="img")
    assert role.entrypoint == specs.MISSING
    assert role.num_replicas == 1
    assert role.max_retries == 0
    assert role.retry_policy == specs.RetryPolicy.APPLICATION
    assert role.resource == specs.NULL_RESOURCE
    assert role.args == [] and role.env == {} and role.mounts == [] and role.port_map == {}
    assert role.min_replicas is None


def test_role_overrides_are_resolved_lazily() -> None:
    calls = []

    def image() -> str:
        calls.append(1)
        return "late"

    role = Role(name="r", image="early", overrides={"image": image})
    assert calls == []
    assert role.image == "late"
    assert role.image == "late"
    assert calls == [1]


def test_app_state_names_and_terminality() -> None:
    assert str(AppState.RUNNING) == "RUNNING"
    assert repr(AppState.FAILED) == "FAILED (5)"
    assert specs.ReplicaState is AppState
    terminal = {s for s in AppState if specs.is_terminal(s)}
    assert terminal == {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED}
    assert specs.is_started(AppState.RUNNING) and not specs.is_started(AppState.PENDING)


def test_macros_substitute_args_env_and_nested_metadata_only() -> None:
    role = Role(
        name="r",
        image=macros.img_root,
        entrypoint=f"{macros.img_root}/bin",
        args=["--id", macros.app_id, f"$${{{macros.rank0_env}:=localhost}}", "$UNKNOWN"],
        env={"R": macros.replica_id},
        metadata={"nested": {"list": [macros.app_id, 3]}},
    )
    values = macros.Values(img_root="/root", app_id="app-1", replica_id="2", rank0_env="HOSTVAR")
    out = values.apply(role)
    assert out.args == ["--id", "app-1", "${HOSTVAR:=localhost}", "$UNKNOWN"]
    assert out.env == {"R": "2"}
    assert out.metadata == {"nested": {"list": ["app-1", 3]}}
    assert out.image == macros.img_root and out.entrypoint == f"{macros.img_root}/bin"
    assert role.args[1] == macros.app_id


def test_macros_apply_keeps_overrides_on_both_roles() -> None:
    role = Role(name="r", image="i", overrides={"image": lambda: "x"})
    out = macros.Values(img_root="", app_id="a", replica_id="0", rank0_env="E").apply(role)
    assert "image" in role.overrides and "image" in out.overrides


@pytest.mark.parametrize(
    ("handle", "expected"),
    [
        ("local_cwd://torchx/echo-abc", ("local_cwd", "torchx", "echo-abc")),
        ("kubernetes:///ns:job", ("kubernetes", "", "ns:job")),
        ("aws_batch://torchx/queue:job-1", ("aws_batch", "torchx", "queue:job-1")),
    ],
)
def test_parse_app_handle(handle: str, expected: tuple[str, str, str]) -> None:
    parsed = specs.parse_app_handle(handle)
    assert tuple(parsed) == expected
    assert specs.make_app_handle(*parsed) == handle


@pytest.mark.parametrize("bad", ["", "local_cwd", "local_cwd://torchx", "://x/y", "a:/b/c"])
def test_malformed_handle_says_the_expected_form(bad: str) -> None:
    with pytest.raises(MalformedAppHandleException, match="SCHEDULER://SESSION/APP_ID"):
        specs.parse_app_handle(bad)


def test_dryrun_info_repr_uses_fmt() -> None:
    info = AppDryRunInfo({"a": 1}, lambda r: f"REQ {r['a']}")
    assert repr(info) == "REQ 1"
    assert info.app is None and info.cfg == {}


def test_app_status_helpers() -> None:
    status = AppStatus(
        state=AppState.FAILED,
        msg="boom",
        roles=[RoleStatus("r", [ReplicaStatus(0, AppState.FAILED, "r", "host")])],
    )
    assert status.is_terminal()
    with pytest.raises(specs.AppStatusError):
        status.raise_for_status()
    AppStatus(state=AppState.SUCCEEDED).raise_for_status()
    text = status.format()
    assert "State: FAILED" in text and " *r[0]:FAILED (no reply file)" in text
    assert "Msg: boom" in text
    js = status.to_json()
    assert js["roles"][0]["replicas"][0]["state"] == "FAILED"
    assert status.roles[0].replicas[0].hostaddr == "host"


def test_runopts_resolve_defaults_required_and_types() -> None:
    opts = runopts()
    opts.add("queue", type_=str, help="q", required=True)
    opts.add("n", type_=int, help="n", default=3)
    opts.add("tags", type_=list[str], help="t")
    with pytest.raises(InvalidRunConfigException, match="missing required option 'queue'"):
        opts.resolve({})
    resolved = opts.resolve({"queue": "q1", "extra": 1})
    assert resolved == {"queue": "q1", "n": 3, "tags": None, "extra": 1}
    with pytest.raises(InvalidRunConfigException, match="'n' expects int"):
        opts.resolve({"queue": "q", "n": "three"})
    assert opts.resolve({"queue": "q", "n": "4"})["n"] == 4


def test_runopts_add_rejects_bad_declarations() -> None:
    opts = runopts()
    with pytest.raises(ValueError, match="cannot have a default"):
        opts.add("x", type_=str, help="", default="a", required=True)
    with pytest.raises(TypeError, match="not of type int"):
        opts.add("y", type_=int, help="", default="a")


def test_cfg_from_str_types_quotes_and_separators() -> None:
    opts = runopts()
    opts.add("s", type_=str, help="")
    opts.add("b", type_=bool, help="", default=False)
    opts.add("i", type_=int, help="")
    opts.add("f", type_=float, help="")
    opts.add("l", type_=list[str], help="")
    opts.add("d", type_=dict[str, str], help="")
    cfg = opts.cfg_from_str('s="a,b=c",b=True,i=3,f=0.5,l=x;y;z,d=k1:v1;k2:v2')
    assert cfg == {
        "s": "a,b=c",
        "b": True,
        "i": 3,
        "f": 0.5,
        "l": ["x", "y", "z"],
        "d": {"k1": "v1", "k2": "v2"},
    }
    assert opts.cfg_from_str("l=x,y")["l"] == ["x", "y"]
    assert opts.cfg_from_str("s=None") == {"s": None}


def test_cfg_from_str_unknown_keys_warn_or_fail() -> None:
    opts = runopts()
    opts.add("queue", type_=str, help="")
    with pytest.warns(UserWarning, match="unknown option 'queu'; did you mean 'queue'"):
        assert opts.cfg_from_str("queu=x") == {}
    with pytest.raises(InvalidRunConfigException, match="did you mean 'queue'"):
        opts.cfg_from_str("queu=x", strict=True)
    with pytest.raises(InvalidRunConfigException, match="KEY=VALUE"):
        opts.cfg_from_str("justaword")


def test_runopts_repr_lists_sections() -> None:
    opts = runopts()
    opts.add("queue", type_=str, help="the queue", required=True)
    opts.add("n", type_=int, help="count", default=1)
    text = repr(opts)
    assert "required arguments:" in text and "queue=QUEUE (str)" in text
    assert "optional arguments:" in text and "n=N (int, 1)" in text


def test_appdef_defaults() -> None:
    app = AppDef(name="a")
    assert app.roles == [] and app.metadata == {}


def test_exceptions_are_one_line_friendly() -> None:
    e = specs.UnknownSchedulerException("local_cdw", ["local_cwd", "slurm"])
    assert "did you mean 'local_cwd'" in str(e)
    assert "torchx-nb list" in str(specs.UnknownAppException("x://y/z"))


# TorchX 0.7.0 behaviour, pinned: the expected text below is what TorchX itself produces.


def _failed_status(message: str, code: object = 3) -> AppStatus:
    err = json.dumps(
        {"message": {"message": message, "errorCode": code, "extraInfo": {"timestamp": 1700000000}}}
    )
    return AppStatus(
        state=AppState.FAILED,
        msg="boom",
        ui_url="http://x",
        roles=[
            RoleStatus(
                "trainer",
                [
                    ReplicaStatus(1, AppState.SUCCEEDED, "trainer", "host1"),
                    ReplicaStatus(0, AppState.FAILED, "trainer", "host0", err),
                ],
            )
        ],
    )


def test_app_status_format_shows_a_failed_replicas_error_as_torchx_does() -> None:
    stamp = datetime.datetime.fromtimestamp(1700000000)
    assert _failed_status("RuntimeError: bad thing happened").format() == (
        "AppStatus:\n"
        "    State: FAILED\n"
        "    Num Restarts: 0\n"
        "    Roles: \n"
        " *trainer[0]:FAILED (exitcode: 3)\n"
        f"        timestamp: {stamp}\n"
        "        hostname: host0\n"
        "        error_msg: RuntimeError: bad thing happened\n"
        "  trainer[1]:SUCCEEDED\n"
        "    Msg: boom\n"
        "    Structured Error Msg: <NONE>\n"
        "    UI URL: http://x\n"
        "    "
    )
    long = " ".join(f"word{i}" for i in range(30))
    text = _failed_status(long, code=None).format()
    assert "FAILED (exitcode: <N/A>)" in text
    assert (
        "        error_msg: word0 word1 word2 word3 word4 word5 word6 word7 word8 word9 word10"
        " word11 word12\n                word13 word14" in text
    )
    nested = (
        "c10::Error: CUDA error: an illegal memory access was encountered\n"
        "Exception raised from create_event_internal at caffe2/c10/cuda/X.cpp:733"
    )
    assert "error_msg: c10::Error: CUDA error: an illegal memory access was encountered\n  " in (
        _failed_status(nested).format()
    )
    # filter_roles keeps only the named roles
    assert "trainer[0]" not in _failed_status("x").format(filter_roles=["other"])


def test_app_status_format_survives_hostile_error_text() -> None:
    hostile = "RuntimeError('On WorkerInfo(" + "x\n" * 20000 + "no closing quote"
    text = _failed_status(hostile).format()
    assert text.startswith("AppStatus:") and "hostname: host0" in text
    st = _failed_status("x")
    st.roles[0].replicas[1].structured_error_msg = "{not json"
    assert "\n *trainer[0]:{not json" in st.format()
    st.roles[0].replicas[1].structured_error_msg = json.dumps({"message": "no dict"})
    assert "\n *trainer[0]:" in st.format()


def test_app_status_str_and_repr_are_torchx_yaml_blocks() -> None:
    st = AppStatus(state=AppState.RUNNING, num_restarts=2, structured_error_msg='{"a": 1}')
    assert repr(st) == (
        "AppStatus:\n  msg: ''\n  num_restarts: 2\n  roles: []\n  state: RUNNING (3)\n"
        "  structured_error_msg:\n    a: 1\n  ui_url: null\n"
    )
    assert str(st) == repr(st)
    failed = _failed_status("boom")
    text = str(failed)
    assert "      state: FAILED (5)\n" in text and "!!python" not in text
    with pytest.raises(specs.AppStatusError, match="job did not succeed: AppStatus:"):
        failed.raise_for_status()


def test_cfg_from_str_reads_lists_as_torchx_does() -> None:
    opts = runopts()
    opts.add("FOO", type_=list[str], default=["a"], help="an optional list option")
    opts.add("BAR", type_=str, required=True, help="a required str option")
    assert opts.cfg_from_str("") == {}
    assert opts.cfg_from_str("FOO=v1") == {"FOO": ["v1"]}
    assert opts.cfg_from_str("FOO=v1,v2") == {"FOO": ["v1", "v2"]}
    assert opts.cfg_from_str("FOO=v1;v2") == {"FOO": ["v1", "v2"]}
    for text in ("FOO=v1,v2,BAR=v3", "FOO=v1;v2,BAR=v3", "FOO=v1;v2;BAR=v3"):
        assert opts.cfg_from_str(text) == {"FOO": ["v1", "v2"], "BAR": "v3"}, text


def test_runopts_is_type_and_dict_default_of_empty_list() -> None:
    assert runopts.is_type(3, int) and runopts.is_type("a", str)
    assert not runopts.is_type("a", int)
    assert runopts.is_type(["a", "b"], typing.List[str])  # noqa: UP006
    assert not runopts.is_type(["a", 1], typing.List[str])  # noqa: UP006
    assert runopts.is_type({"k": "v"}, typing.Dict[str, str])  # noqa: UP006
    assert not runopts.is_type({"k": 1}, typing.Dict[str, str])  # noqa: UP006
    assert not runopts.is_type(1.5, typing.List[str])  # noqa: UP006
    opts = runopts()
    opts.add("labels", type_=typing.Dict[str, str], help="", default=[])  # noqa: UP006
    assert opts.get("labels").default == []  # type: ignore[union-attr]


def test_get_type_name_is_exported_as_in_torchx() -> None:
    assert "get_type_name" in specs.__all__
    assert specs.get_type_name(int) == "int"
    assert specs.get_type_name(str) == "str"
    assert specs.get_type_name(typing.List[str]) == "typing.List[str]"  # noqa: UP006
    assert specs.get_type_name(typing.Dict[str, str]) == "typing.Dict[str, str]"  # noqa: UP006
