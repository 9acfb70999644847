"""TorchX's component linter (``torchx.specs.file_linter``): the rules a component function
must follow for the CLI to turn its signature into options, checked on the source without
running it; and the docstring reader and help formatter the CLI uses."""

from __future__ import annotations

import argparse
import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

COMPLEX = ("Dict", "List", "dict", "list")
RETURN = "AppDef"


@dataclass
class LinterMessage:
    """One finding: which validator, what, where."""

    name: str
    description: str
    line: int
    char: int
    severity: str = "error"


class TorchXArgumentHelpFormatter(
    argparse.RawDescriptionHelpFormatter,
    argparse.ArgumentDefaultsHelpFormatter,
    argparse.MetavarTypeHelpFormatter,
):
    """Appends ``(required)`` or ``(default: VALUE)`` to each option's help, as TorchX's."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is argparse.SUPPRESS:
            return text
        return text + (" (required)" if action.required else f" (default: {action.default})")


def get_fn_docstring(fn: Callable[..., object]) -> tuple[str, dict[str, str]]:
    """The function's description (its short and long description) and each parameter's, from
    a Google-style docstring; a parameter without one gets ``" "`` (argparse drops empty
    help), and a function without a docstring a hint naming it."""
    import docstring_parser

    described = {name: " " for name in inspect.signature(fn).parameters}
    fallback = (
        f"{getattr(fn, '__name__', 'component')} TIP: improve this help string by adding a"
        " docstring\nto your component (see:"
        " https://pytorch.org/torchx/latest/component_best_practices.html)"
    )
    doc = inspect.getdoc(fn)
    if not doc:
        return fallback, described
    parsed = docstring_parser.parse(doc)
    for param in parsed.params:
        if param.description is not None:
            described[param.arg_name] = param.description
    text = parsed.short_description or fallback
    if parsed.long_description:
        text += "\n" + parsed.long_description
    return text, described


def _message(text: str, line: int, name: str = "TorchxFunctionValidator") -> LinterMessage:
    return LinterMessage(name=name, description=text, line=line, char=0)


def _head(node: ast.expr) -> str:
    """``Optional`` of ``Optional[int]``, ``List`` of ``typing.List[str]``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _check_arg(function: str, arg: ast.arg) -> list[LinterMessage]:
    """Primitives, ``Optional`` of one, ``List``/``Dict`` of primitives (optionally
    ``Optional``): what the CLI can parse."""
    kind = arg.annotation
    if kind is None:
        return [_message(f"Arg {arg.arg} missing type annotation", arg.lineno)]
    if not isinstance(kind, ast.Subscript):
        return []
    if _head(kind.value) == "Optional":
        inner = kind.slice
        if not isinstance(inner, ast.Subscript):
            return []
        kind = inner
    head = _head(kind.value)
    if head not in COMPLEX:
        return [
            _message(
                f"`{function}` allows only Dict, List as complex types.Argument `{arg.arg}`"
                f" has: {head}",
                arg.lineno,
            )
        ]
    inner = kind.slice
    if head.lower() == "dict":
        parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        return [
            _message("Dict can only have primitive types", arg.lineno)
            for part in parts
            if not isinstance(part, ast.Name)
        ]
    if not isinstance(inner, ast.Name):
        return [_message("List can only have primitive types", arg.lineno)]
    return []


def _check_return(fn: ast.FunctionDef) -> list[LinterMessage]:
    ret = fn.returns
    name = None
    if isinstance(ret, (ast.Name, ast.Attribute)):
        name = _head(ret)
    elif isinstance(ret, ast.Constant) and isinstance(ret.value, str):
        name = ret.value.rpartition(".")[2]
    if name is None:
        return [
            _message(
                f"Function: {fn.name} missing return annotation or has unknown annotations."
                f" Supported return annotation: {RETURN}",
                fn.lineno,
            )
        ]
    if name != RETURN:
        return [
            _message(
                f"Function: {fn.name} has incorrect return annotation, supported annotation:"
                f" {RETURN}",
                fn.lineno,
            )
        ]
    return []


def validate(path: str, component_function: str) -> list[LinterMessage]:
    """Every rule the function ``component_function`` of the file ``path`` breaks: each
    parameter annotated with a type the CLI parses, ``AppDef`` returned. A syntax error or a
    missing function is one message."""
    source = Path(path).read_text()
    try:
        module = ast.parse(source)
    except SyntaxError as e:
        return [LinterMessage("TorchXValidator", e.msg, e.lineno or 0, e.offset or 0, "error")]
    found: list[LinterMessage] = []
    seen = False
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == component_function:
            seen = True
            args = [*node.args.args, *([node.args.vararg] if node.args.vararg else [])]
            for arg in [*args, *node.args.kwonlyargs]:
                found += _check_arg(node.name, arg)
            found += _check_return(node)
    if not seen:
        found.append(
            LinterMessage("TorchXValidator", f"Function {component_function} not found", 0, 0)
        )
    return found
