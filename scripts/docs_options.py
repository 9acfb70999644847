"""Writes the option tables of docs/schedulers/index.md (between ``<!-- options:begin -->``
and ``<!-- options:end -->``) from each built-in backend's typed options: the same structure
the runopts table, the CLI's ``runopts`` and ``.torchxconfig`` templates come from.

Usage: python scripts/docs_options.py [--check]   (--check: exit 1 if the page is stale)"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchx_nb.schedulers import DEFAULT_SCHEDULER_MODULES  # noqa: E402
from torchx_nb.schedulers.abilities import TakesTypedOptions  # noqa: E402
from torchx_nb.specs.api import get_type_name  # noqa: E402

BEGIN = "<!-- options:begin -->"
END = "<!-- options:end -->"


def tables() -> str:
    parts = []
    for name, module_name in DEFAULT_SCHEDULER_MODULES.items():
        module = importlib.import_module(module_name)
        sched = next(
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, TakesTypedOptions) and v is not TakesTypedOptions
        )
        rows = ["| option | type | default | |", "|---|---|---|---|"]
        for key, opt in sched.opts_type.as_runopts():
            default = "required" if opt.is_required else ("" if opt.default is None else f"`{opt.default}`")
            text = opt.help.replace("|", "\\|")
            rows.append(f"| `{key}` | {get_type_name(opt.opt_type)} | {default} | {text} |")
        parts.append(f"**{name}** (`{sched.opts_type.__name__}`)\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


def render(readme: str) -> str:
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{tables()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    path = ROOT / "docs" / "schedulers" / "index.md"
    text = path.read_text()
    if BEGIN not in text or END not in text:
        print(f"{path} has no {BEGIN} ... {END} block")
        return 1
    new = render(text)
    if args.check:
        return 0 if new == text else 1
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
