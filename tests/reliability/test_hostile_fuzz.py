"""Hypothesis fuzzing of everything a user types: job names, args, env, cfg strings, handles,
ignore-file lines. Each must give a result or one clear error, and never reach outside our
folders or ship a secret."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchx_nb import specs
from torchx_nb.redact import MASK, redact_text
from torchx_nb.runner import Runner
from torchx_nb.schedulers.ids import make_unique, safe_name
from torchx_nb.schedulers.local_cwd import create_scheduler
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.collect import collect_workspace
from torchx_nb.workspace.ignore import parse_patterns

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
hostile = st.text(
    st.sampled_from(list("ab/.-_$`'\";|&\\*?[]!{}()~ \n\t\0é🙂")) | st.characters(), max_size=40
)


@FUZZ
@given(hostile)
def test_any_name_makes_a_safe_app_id(name: str) -> None:
    app_id = make_unique(name)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", app_id)
    assert safe_name(name) not in ("", ".", "..")


@FUZZ
@given(
    name=hostile,
    arg=hostile,
    key=st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True),
    value=hostile,
)
def test_dryrun_of_hostile_input_stays_in_the_state_folder(
    name: str, arg: str, key: str, value: str
) -> None:
    sched = create_scheduler("torchx")
    app = specs.AppDef(
        name=name,
        roles=[specs.Role(name="r", image="x", entrypoint="echo", args=[arg], env={key: value})],
    )
    info = sched.submit_dryrun(app, {})
    state = Path(info.request.state_dir).resolve()
    assert state.parent == (sched.state_root / "torchx").resolve()
    assert str(info)  # the printed request renders


@FUZZ
@given(hostile)
def test_hostile_handles_never_leave_the_state_folder(app_id: str) -> None:
    sched = create_scheduler("torchx")
    try:
        assert sched.describe(app_id) is None
    except ValueError as e:
        assert "not a local_cwd app id" in str(e)


@FUZZ
@given(st.text(max_size=60))
def test_cfg_strings_give_values_or_one_clear_error(text: str) -> None:
    runner = Runner("torchx")
    try:
        runner.cfg_from_str("local_cwd", text)
    except (TorchxNbError, ValueError) as e:
        assert "\n" not in str(e).strip()


@FUZZ
@given(st.lists(hostile, max_size=8))
def test_ignore_lines_parse_or_name_the_bad_line(lines: list[str]) -> None:
    try:
        patterns = parse_patterns(lines, ".torchxignore")
    except TorchxNbError as e:
        assert str(e).startswith(".torchxignore: bad pattern")
        return
    for p in patterns:
        p.regex.match("a/" * 200 + "b")  # no catastrophic backtracking on deep paths


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(hostile, max_size=6))
def test_no_ignore_file_can_unship_a_secret_silently(
    tmp_path_factory: object, lines: list[str]
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / ".aws").mkdir()
        (root / ".aws" / "credentials").write_text("x")
        (root / "id_rsa").write_text("x")
        (root / "main.py").write_text("x")
        (root / ".torchxignore").write_text("\n".join(line.replace("\0", "") for line in lines))
        try:
            ws = collect_workspace(root)
        except TorchxNbError:
            return
        shipped = {f.path for f in ws.files}
        secret_files = shipped & {".aws/credentials", "id_rsa"}
        assert secret_files == {p for p, _ in ws.shipped_secrets}


@FUZZ
@given(prefix=hostile, token=st.from_regex(r"[A-Za-z0-9]{36}", fullmatch=True))
def test_tokens_are_masked_whatever_surrounds_them(prefix: str, token: str) -> None:
    out = redact_text(f"{prefix} hf_{token} ")
    assert f"hf_{token}" not in out and MASK in out
