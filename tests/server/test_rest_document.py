"""The server and its OpenAPI document are one truth: every enum query value the document lists
is taken and every other one (another case, ``once=yes``) is a 400; an event id of the document's
form that this stream cannot resume from is a ``reset``, and only a malformed one a 400; a
request body field of the wrong kind is a 400 naming that field."""

from __future__ import annotations

import http.client
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.infra.lab import Lab
from tests.server.api_client import API, DOC, request, sse
from tests.server.test_rest_notebook_jobs import post

pytestmark = pytest.mark.slow


def enum_params() -> list[tuple[str, str, list[str]]]:
    """(path, parameter, values) of every GET query parameter with an enum, on operations
    without path parameters."""
    found = []
    for path, item in DOC["paths"].items():
        if "{" in path or "get" not in item:
            continue
        for param in item["get"].get("parameters", []):
            if param["in"] == "query" and "enum" in param["schema"]:
                found.append((path, param["name"], param["schema"]["enum"]))
    return found


def ask(lab: Lab, path: str, query: str) -> int:
    """The status of GET ``path?query`` (read from the headers: a stream is not read)."""
    url = f"{path}?once=1&{query}" if path.endswith("/events") else f"{path}?{query}"
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(lab.url).netloc, timeout=60)
    try:
        conn.request("GET", url, headers={"Authorization": f"token {lab.token}"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_document_lists_the_enums_the_server_checks() -> None:
    names = {(p.rsplit("/", 1)[-1], n) for p, n, _ in enum_params()}
    assert {("jobs", "state"), ("events", "state"), ("events", "once")} <= names, names


@pytest.mark.parametrize(("path", "name", "values"), enum_params())
def test_every_listed_value_is_taken_and_no_other(
    lab: Lab, store: Path, path: str, name: str, values: list[str]
) -> None:
    for value in values:
        assert ask(lab, path, f"{name}={value}") == 200, (path, name, value)
    others = {v.lower() for v in values} | {v.title() for v in values} | {"yes", "", "2", " 1"}
    for value in sorted(others - set(values)):
        query = f"{name}={urllib.parse.quote(value)}"
        assert ask(lab, path, query) == 400, (path, name, value)


def test_a_well_formed_event_id_is_a_reset_and_only_a_malformed_one_a_400(
    lab: Lab, store: Path
) -> None:
    param = next(
        p
        for p in DOC["paths"][f"{API}/events"]["get"]["parameters"]
        if p["name"] == "Last-Event-ID"
    )
    pattern = re.compile(param["schema"]["pattern"])
    position = request(lab, "GET", f"{API}/jobs?per_page=1")
    assert position[0] == 200
    # another server's epoch, an earlier run's, a version past this one's (a store whose
    # counter went back, or a restart): the document's form, so a reset
    for stale in ("0123abcd.1", "ffffffff.0", "deadbeef.999999999999999999"):
        assert pattern.fullmatch(stale)
        status, _, body = request(lab, "GET", f"{API}/events?once=1", {"Last-Event-ID": stale})
        assert status == 200 and sse(body.decode())[0] == ("reset", {}), (stale, status)
    for bad in ("garbage", "0123ABCD.1", "0123abcd.", "0123abcd.1, 0123abcd.2", "1" * 300):
        assert not pattern.fullmatch(bad)
        status, _, _ = request(lab, "GET", f"{API}/events?once=1", {"Last-Event-ID": bad})
        assert status == 400, bad


BODY = DOC["paths"][f"{API}/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]


def wrong_value(schema: dict[str, Any]) -> Any:
    """A value of a kind the field's schema does not take."""
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    return {"text": 1} if "object" in kinds or "string" in kinds else "not a number"


@pytest.mark.parametrize("field", sorted(BODY["properties"]))
def test_a_body_field_of_the_wrong_kind_is_a_400_naming_it(
    lab: Lab, store: Path, field: str
) -> None:
    body: dict[str, Any] = {"notebook": "reports/daily.ipynb"}
    value = wrong_value(BODY["properties"][field])
    if field in ("parameters", "typed_parameters", "cfg"):
        value = ["a list"]
    body[field] = value
    status, answer = post(lab, f"{API}/jobs", body)
    assert status == 400, answer
    assert answer["reason"].startswith(f"{field} must be "), answer
    assert BODY["properties"][field]["x-must"] in answer["reason"]
