"""Failure cards of real local_cwd jobs, as each surface shows them: the CLI's lines, the REST
answer, the webhook body. Bounded (a 200,000-character exception, 5 MB printed on one line),
clean (no terminal escapes), ``sys.exit("message")`` said, the first failure the earliest, and
a positive exit code never called a signal."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import cli, shell_app
from tests.infra.webhook import webhook_receiver
from torchx_nb import notices, specs
from torchx_nb.components.cell import cell
from torchx_nb.runner import get_runner

ESC = "\x1b"


def _ended(runner: object, handle: str) -> None:
    runner.wait(handle, wait_interval=0.1, timeout=90)  # type: ignore[attr-defined]


def test_a_huge_exception_and_a_huge_line_stay_bounded_everywhere(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with webhook_receiver() as hook:
        monkeypatch.setenv(notices.NOTIFY_ENV, hook.url)
        with get_runner() as runner:
            huge = runner.run(
                cell(source="raise ValueError('x' * 200_000)", name="huge"),
                "local_cwd",
                {},
                workspace=str(isolated),
            )
            flood = runner.run(
                cell(
                    source="import sys\nprint('y' * 5_000_000, flush=True)\n"
                    "print('\\x1b[31mred\\x1b[0m done', flush=True)\nsys.exit(9)",
                    name="flood",
                ),
                "local_cwd",
                {},
                workspace=str(isolated),
            )
            for h in (huge, flood):
                _ended(runner, h)
            notices.drain()
            deadline = time.monotonic() + 30
            while len(hook.posts) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
        bodies = {b["handle"]: b for b in hook.bodies()}
    assert set(bodies) == {huge, flood}
    for body in bodies.values():
        assert len(json.dumps(body).encode()) <= notices.MAX_BODY_BYTES
        assert ESC not in json.dumps(body, ensure_ascii=False)
    card = bodies[huge]["failure"]
    assert card["headline"].startswith("cell/0 raised ValueError: xxxx")
    assert "more characters)" in card["headline"] and len(card["headline"]) < 600
    assert bodies[flood]["failure"]["last_lines"][-1] == "red done"

    code, _, err = cli("watch", "--no-log", flood)
    assert code == 1
    assert len(err.encode()) < 16_000, len(err)
    assert ESC not in err and "    red done" in err
    assert "torchx-nb: cell/0 exited with code 9" in err, err[:2000]
    code, out, err = cli("status", huge)
    assert code == 0, err
    assert len(out.encode()) < 32_000 and ESC not in out


def test_sys_exit_with_a_message_says_it(isolated: Path) -> None:
    """As Python does: the message goes to stderr (the job's log) and the exit code is 1; the
    card's headline is the message."""
    with get_runner() as runner:
        handle = runner.run(
            cell(source="import sys\nsys.exit('fatal: config missing')", name="cfg"),
            "local_cwd",
            {},
            workspace=str(isolated),
        )
        _ended(runner, handle)
        (card,) = runner.failure_cards(handle)
        log = list(runner.log_lines(handle, "cell", 0))
    assert card.headline() == "cell/0 raised SystemExit: fatal: config missing (exit code 1)"
    assert "fatal: config missing\n" in log
    code, _, err = cli("watch", "--no-log", handle)
    assert code == 1
    assert "cell/0 raised SystemExit: fatal: config missing (exit code 1)" in err, err


def test_sys_exit_with_a_hostile_message_still_says_it(isolated: Path) -> None:
    """``sys.exit`` with a lone surrogate in its message, or with an object whose ``__str__``
    raises: the cell runner itself crashed writing the card's line (UnicodeEncodeError, or
    the RuntimeError) and the card said only "exited with code 1" above the runner's own
    traceback. Now: exit code 1 as Python gives, the message escaped as Python's stderr
    escapes it, and for the object what str() did."""
    bad_str = "class B:\n    def __str__(self): raise RuntimeError('no')\nimport sys\nsys.exit(B())"
    with get_runner() as runner:
        lone = runner.run(
            cell(source="import sys\nsys.exit('fatal \\udcff config')", name="lone"),
            "local_cwd",
            {},
            workspace=str(isolated),
        )
        odd = runner.run(cell(source=bad_str, name="odd"), "local_cwd", {}, str(isolated))
        for handle in (lone, odd):
            _ended(runner, handle)
        (lone_card,) = runner.failure_cards(lone)
        (odd_card,) = runner.failure_cards(odd)
        log = list(runner.log_lines(lone, "cell", 0))
    assert lone_card.headline() == "cell/0 raised SystemExit: fatal \\udcff config (exit code 1)"
    assert log == ["fatal \\udcff config\n"], log
    assert (
        odd_card.headline()
        == "cell/0 raised SystemExit: <str() failed: RuntimeError> (exit code 1)"
    )
    assert not any("cell_main.py" in line for line in odd_card.last_lines), odd_card.last_lines


def test_a_positive_exit_code_is_not_a_signal_and_a_signal_is(isolated: Path) -> None:
    with get_runner() as runner:
        own = runner.run(
            cell(source="import os\nos._exit(139)", name="own"), "local_cwd", {}, str(isolated)
        )
        segv = runner.run(
            cell(source="import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", name="segv"),
            "local_cwd",
            {},
            str(isolated),
        )
        for h in (own, segv):
            _ended(runner, h)
        (own_card,) = runner.failure_cards(own)
        (segv_card,) = runner.failure_cards(segv)
    assert own_card.headline() == "cell/0 exited with code 139"
    assert segv_card.headline() == "cell/0 was killed by SIGSEGV (exit code -11)"


def test_the_first_failure_is_the_one_that_ended_first(isolated: Path) -> None:
    """Role ``a`` fails two seconds after role ``b``: ``b`` is the first failure, though ``a``
    comes first by name."""
    late = shell_app("sleep 2; exit 5", role="a")
    early = shell_app("exit 3", role="b")
    app = specs.AppDef("two", roles=[late.roles[0], early.roles[0]])
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd", {}, str(isolated))
        _ended(runner, handle)
        cards = runner.failure_cards(handle)
    assert [c.headline() for c in cards] == ["b/0 exited with code 3", "a/0 exited with code 5"]
    code, _, err = cli("watch", "--no-log", handle)
    assert code == 1
    assert err.index("b/0 exited with code 3") < err.index("a/0 exited with code 5")
