from __future__ import annotations

import pytest

from torchx_nb.specs.failure import FailureCard, signal_name


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (137, "SIGKILL"),
        (-9, "SIGKILL"),
        (143, "SIGTERM"),
        (-15, "SIGTERM"),
        (139, "SIGSEGV"),
        (1, None),
        (0, None),
        (None, None),
        (255, None),
        (128 + 31, "SIGSYS"),
    ],
)
def test_the_signal_behind_an_exit_code(code: int | None, name: str | None) -> None:
    assert signal_name(code) == name


def test_headlines_say_what_happened_first() -> None:
    assert FailureCard("cell", 0, 1, exception="ValueError: boom").headline() == (
        "cell/0 raised ValueError: boom (exit code 1)"
    )
    assert FailureCard("main", 0, 137, oom=True).headline() == (
        "main/0 ran out of memory (exit code 137, SIGKILL)"
    )
    assert FailureCard("w", 1, -9).headline() == "w/1 was killed by SIGKILL (exit code -9)"
    assert FailureCard("w", 2, 3).headline() == "w/2 exited with code 3"
    assert FailureCard("w", 3).headline() == "w/3 failed"
    card = FailureCard("cell", 0, 1, exception="KeyError: 'x'", last_lines=["a", "b\n"])
    assert card.text() == "cell/0 raised KeyError: 'x' (exit code 1)\n  last lines:\n    a\n    b"
    assert card.to_json()["signal"] is None and card.to_json()["headline"] == card.headline()


def test_the_exception_line_of_torchelastics_error_file() -> None:
    from torchx_nb.specs.failure import torchelastic_exception

    recorded = (
        '{"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack":'
        ' "Traceback (most recent call last):\\n  ...\\nValueError: bad batch\\n",'
        ' "timestamp": "1795670000"}}}'
    )
    assert torchelastic_exception(recorded) == "ValueError: bad batch"
    assert torchelastic_exception('{"message": "RuntimeError: x"}') == "RuntimeError: x"
    assert torchelastic_exception("FAILED (exit code 3): Error") is None
    assert torchelastic_exception("{not json") is None and torchelastic_exception(None) is None


def test_cards_are_bounded_and_free_of_terminal_escapes() -> None:
    from torchx_nb.specs.failure import MAX_CARD_BYTES, MAX_LINE, MAX_LINES

    card = FailureCard(
        "cell",
        0,
        1,
        exception="ValueError: " + "x" * 200_000,
        last_lines=["\x1b[31mred\x1b[0m \x1b]0;title\x07done"] + ["é" * 5000] * 50,
    )
    import json

    assert len(card.exception or "") <= MAX_LINE
    assert card.exception.endswith("more characters)")  # type: ignore[union-attr]
    assert len(card.last_lines) <= MAX_LINES
    assert all(len(line) <= MAX_LINE for line in card.last_lines)
    assert len(json.dumps(card.to_json()).encode()) <= MAX_CARD_BYTES + 1000
    clean = FailureCard("c", 0, 1, last_lines=["\x1b[1;31mError\x1b[0m: \x1b[2Kbad\r\n"])
    assert clean.last_lines == ["Error: bad"]


def test_a_signal_is_named_only_where_the_scheduler_says_so() -> None:
    # a local process that called os._exit(139): its scheduler says no signal
    assert FailureCard("w", 0, 139, signal_number=0).headline() == "w/0 exited with code 139"
    # Slurm's 0:11
    assert FailureCard("w", 0, None, signal_number=11).headline() == "w/0 was killed by SIGSEGV"
    # a container's 137 (the runtime's 128+N), where the scheduler names none
    assert FailureCard("w", 0, 137).signal == "SIGKILL"


def test_the_first_failure_is_the_earliest() -> None:
    from torchx_nb.specs.failure import first_failures

    late = FailureCard("a", 0, 1, exception="ValueError: late", ended=200.0)
    early = FailureCard("b", 1, 3, ended=100.0)
    untimed = FailureCard("a", 1, 137)
    assert first_failures([late, untimed, early]) == [early, late, untimed]
