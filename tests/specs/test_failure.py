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
