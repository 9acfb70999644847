"""``--push``: names checked, values pickled once each, the size limit enforced, each refusal
one line naming the variable."""

from __future__ import annotations

import pickle
import threading

import cloudpickle
import pytest

from torchx_nb.notebook.push import PUSH_LIMIT, pickle_push, push_names
from torchx_nb.specs.api import TorchxNbError


def test_names() -> None:
    assert push_names("a, b,a,") == ["a", "b"]
    for bad, why in (
        ("", "needs variable names"),
        (",", "needs variable names"),
        ("a-b", "'a-b' is not a Python variable name"),
        ("class", "'class' is not a Python variable name"),
        ("x;import os", "is not a Python variable name"),
    ):
        with pytest.raises(TorchxNbError, match=why):
            push_names(bad)


def test_values_round_trip_and_refusals() -> None:
    payload = pickle_push({"n": 3, "f": lambda x: x + 1, "other": 9}, ["n", "f"])
    values = {k: cloudpickle.loads(v) for k, v in pickle.loads(payload).items()}
    assert set(values) == {"n", "f"} and values["f"](values["n"]) == 4
    with pytest.raises(TorchxNbError, match="^--push: missing is not defined in the kernel$"):
        pickle_push({}, ["missing"])
    with pytest.raises(TorchxNbError, match=r"^--push: lk \(lock\) cannot be pickled"):
        pickle_push({"lk": threading.Lock()}, ["lk"])
    with pytest.raises(TorchxNbError, match=r"--push: big is 1\.0 MiB pickled, over the 0\.5 MiB"):
        pickle_push({"big": b"x" * (1 << 20)}, ["big"], limit=1 << 19)
    with pytest.raises(TorchxNbError, match="are 0.6 MiB pickled together, over the 0.5 MiB"):
        pickle_push({"a": b"x" * 300_000, "b": b"y" * 300_000}, ["a", "b"], limit=1 << 19)
    assert PUSH_LIMIT == 64 * 1024 * 1024  # the figure in docs/results.md
