"""How every benchmark states its targets: one line ``target: WHAT: FIGURES PASS|FAIL`` each,
and exit status 1 when any failed; ``bash scripts/bench`` reads both."""

from __future__ import annotations


class Targets:
    """The targets one benchmark checked."""

    def __init__(self) -> None:
        self.results: list[tuple[str, bool]] = []

    def check(self, what: str, ok: bool, figures: str) -> bool:
        print(f"target: {what}: {figures} {'PASS' if ok else 'FAIL'}")
        self.results.append((what, ok))
        return ok

    def exit_code(self) -> int:
        return 0 if all(ok for _, ok in self.results) else 1
