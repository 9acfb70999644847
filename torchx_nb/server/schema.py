"""The shipped OpenAPI document as the one truth of what the REST API takes: query values and
request bodies are checked against its schemas with jsonschema (which jupyter_server brings),
so the server cannot accept what the document refuses, nor the other way round."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from torchx_nb.specs.exceptions import DoesNotConform as DoesNotConform

DOCUMENT = Path(__file__).with_name("openapi.json")


@functools.cache
def document() -> dict[str, Any]:
    return json.loads(DOCUMENT.read_text())


@functools.cache
def _validator(path: str, method: str, where: str, name: str) -> Any:
    """jsonschema's validator for one parameter's schema (``where``: query or header), or
    the operation's JSON body (``where="body"``)."""
    import jsonschema

    op = document()["paths"][path][method]
    if where == "body":
        schema = op["requestBody"]["content"]["application/json"]["schema"]
    else:
        found = [p for p in op["parameters"] if p["in"] == where and p["name"] == name]
        if not found:
            raise KeyError(f"{method.upper()} {path} has no {where} parameter {name!r}")
        schema = found[0]["schema"]
    return jsonschema.Draft202012Validator({**schema, "components": document()["components"]})


def check_param(path: str, method: str, name: str, value: str | None, where: str = "query") -> None:
    """``value`` (None: not sent) is what the document allows for that parameter."""
    if value is None:
        return
    error = next(iter(_validator(path, method, where, name).iter_errors(value)), None)
    if error is not None:
        allowed = error.schema.get("enum") if isinstance(error.schema, dict) else None
        said = f"one of {', '.join(map(str, allowed))}" if allowed else error.message[:200]
        raise DoesNotConform(f"{name} must be {said}" if allowed else f"{name}: {said}")


def check_body(path: str, method: str, body: Any) -> None:
    """``body`` conforms to the operation's request body schema. The first error is one line
    naming its field and what the field must be (the schema's ``x-must`` annotation)."""
    import jsonschema.exceptions

    validator = _validator(path, method, "body", "")
    error = jsonschema.exceptions.best_match(validator.iter_errors(body))
    if error is None:
        return
    schema = validator.schema
    fields = schema.get("properties", {})
    where = [str(p) for p in error.absolute_path]
    if not where and error.validator == "additionalProperties":
        extra = sorted(set(body) - set(fields))[0]
        raise DoesNotConform(
            f"unknown field {extra[:60]!r}: fields are {', '.join(sorted(fields))}"
        )
    if not where and error.validator == "required":
        where = [next(f for f in error.validator_value if f not in body)]
    if not where:
        raise DoesNotConform(f"the body must be {schema.get('x-must', 'as documented')}")
    top = where[0]
    if "propertyNames" in error.relative_schema_path:
        where.append(str(error.instance)[:60])
    must = f"{top} must be {fields.get(top, {}).get('x-must', 'as documented')}"
    dotted = ".".join(where)
    raise DoesNotConform(must if dotted == top else f"{dotted}: {must}")


__all__ = ["DOCUMENT", "DoesNotConform", "check_body", "check_param", "document"]
