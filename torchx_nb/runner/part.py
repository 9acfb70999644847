"""What the Runner's submitting and watching parts hold alike: the shared context, the
noticing and attempts parts, and the TorchX-named methods their composite calls go through."""

from __future__ import annotations

from typing import Generic, TypeVar, cast

from torchx_nb.runner.attempts import Attempts
from torchx_nb.runner.core import RunnerContext
from torchx_nb.runner.noticing import Noticing

E = TypeVar("E")


class RunnerPart(Generic[E]):
    """A part over the Runner's shared context. ``entries`` are the Runner's (a subclass's)
    public methods the part's composite calls go through (``run`` calls ``dryrun`` then
    ``schedule``; ``wait`` polls ``status``); a part used on its own goes through its own."""

    def __init__(
        self,
        ctx: RunnerContext,
        noticing: Noticing,
        attempts: Attempts,
        entries: E | None = None,
    ) -> None:
        self.ctx = ctx
        self._noticing = noticing
        self._attempts = attempts
        self._entries: E = entries if entries is not None else cast(E, self)
