"""What the REST API tests share: HTTP calls with Jupyter's token, server-sent event parsing,
and checks against the shipped OpenAPI document."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any

from tests.conftest import ROOT, shell_app
from tests.infra.lab import Lab
from torchx_nb import specs

API = "/torchx-nb/api"
DOC = json.loads((ROOT / "torchx_nb" / "server" / "openapi.json").read_text())


def conforms(body: Any, path: str, method: str = "get", status: str = "200") -> None:
    """``body`` matches the OpenAPI document's response schema for that operation."""
    import jsonschema

    content = DOC["paths"][path][method]["responses"][status]["content"]["application/json"]
    schema = {**content["schema"], "components": DOC["components"]}
    jsonschema.Draft202012Validator(schema).validate(body)


def request(
    lab: Lab, method: str, path: str, headers: dict[str, str] | None = None, token: bool = True
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(lab.url).netloc, timeout=30)
    hdrs = {"Authorization": f"token {lab.token}"} if token else {}
    hdrs.update(headers or {})
    conn.request(method, path, headers=hdrs, body=b"" if method == "POST" else None)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), body


def get(lab: Lab, path: str) -> Any:
    status, _, body = request(lab, "GET", path)
    assert status == 200, body
    return json.loads(body)


def enc(handle: str) -> str:
    return urllib.parse.quote(handle, safe="")


def sh(name: str, script: str) -> specs.AppDef:
    return shell_app(script, name=name, role="main")


def sse(text: str) -> list[tuple[str, Any]]:
    """Server-sent event blocks as (event, data) pairs, with ``("id", value)`` for ids."""
    events: list[tuple[str, Any]] = []
    for block in text.split("\n\n"):
        kind, data = "message", []
        for line in block.splitlines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line.startswith("id: "):
                events.append(("id", line[4:]))
        if data:
            events.append((kind, json.loads("\n".join(data))))
    return events


def validate(body: Any, schema_name: str) -> None:
    import jsonschema

    schema = {**DOC["components"]["schemas"][schema_name], "components": DOC["components"]}
    jsonschema.Draft202012Validator(schema).validate(body)
