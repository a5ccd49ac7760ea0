"""The HTTP API: every route, its parameters, bodies and status codes, from the OpenAPI document."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml  # noqa: TID251  (docs tooling, outside the package, reads it as the tests do)

from refpages._markdown import REPO, code, generated_from, plain, table
from refpages._schema import allowed, kind, object_section

__all__ = ["OPENAPI", "page", "render"]

OPENAPI = REPO / "specs" / "openapi.yaml"
"""The OpenAPI document the server's contract tests check it against."""

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def _resolve(document: Mapping[str, Any], item: Mapping[str, Any]) -> Mapping[str, Any]:
    """``item``, or what its local ``$ref`` (``#/components/...``) points at."""
    ref = item.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return item
    found: Any = document
    for part in ref[2:].split("/"):
        found = found[part]
    return _resolve(document, found)


def _bodies(content: Mapping[str, Any]) -> str:
    return "; ".join(
        f"{code(media)}: {kind(shape.get('schema', {}))}" for media, shape in content.items()
    )


def _parameters(document: Mapping[str, Any], given: list[Mapping[str, Any]]) -> list[str]:
    rows = []
    for item in given:
        p = _resolve(document, item)
        schema = p.get("schema", {})
        rows.append(
            (
                code(p["name"]),
                p.get("in", ""),
                "yes" if p.get("required") else "no",
                kind(schema),
                allowed(schema),
                plain(p.get("description", "")),
            )
        )
    if not rows:
        return []
    header = ("Parameter", "In", "Required", "Type", "Allowed", "Description")
    return ["Parameters:", "", table(header, rows)]


def _operation(document: Mapping[str, Any], path: str, method: str, shared: list[Any]) -> str:
    op = document["paths"][path][method]
    lines = [f"### {method.upper()} {path}", ""]
    lines += [plain(op.get("summary", "")), ""]
    if op.get("description"):
        lines += [plain(op["description"]), ""]
    if op.get("security") == []:
        lines += ["No token needed.", ""]
    lines += _parameters(document, [*shared, *op.get("parameters", [])])
    if "requestBody" in op:
        body = _resolve(document, op["requestBody"])
        needed = "required" if body.get("required") else "optional"
        lines += [f"Request body ({needed}): {_bodies(body.get('content', {}))}.", ""]
    rows = []
    for status, response in sorted(op.get("responses", {}).items()):
        answer = _resolve(document, response)
        rows.append(
            (
                code(str(status)),
                plain(answer.get("description", "")),
                _bodies(answer.get("content", {})),
            )
        )
    lines += ["Responses:", "", table(("Status", "Meaning", "Body"), rows)]
    return "\n".join(lines)


def render(document: Mapping[str, Any]) -> str:
    """The page for an OpenAPI 3 document."""
    info = document.get("info", {})
    lines = [
        "# HTTP API",
        "",
        plain(info.get("summary", "")),
        "",
        plain(info.get("description", "")),
        "",
        generated_from("specs/openapi.yaml"),
        "## Routes",
        "",
    ]
    for path, item in document.get("paths", {}).items():
        shared = item.get("parameters", [])
        lines += [_operation(document, path, m, shared) for m in _METHODS if m in item]
    schemes = document.get("components", {}).get("securitySchemes", {})
    if schemes:
        lines += ["## Authentication", ""]
        for name, scheme in schemes.items():
            kind_of = f"{scheme.get('type', '')} {scheme.get('scheme', '')}".strip()
            lines.append(f"- {code(name)}: {kind_of}. {plain(scheme.get('description', ''))}")
        lines.append("")
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", "", "The shapes of request and response bodies.", ""]
        lines += [object_section(name, schema) for name, schema in schemas.items()]
    return "\n".join(lines)


def page(path: Path = OPENAPI) -> str:
    """The page from the OpenAPI document at ``path``."""
    return render(yaml.safe_load(path.read_text(encoding="utf-8")))
