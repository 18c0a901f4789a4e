"""The HTTP API reference, from the OpenAPI document of the API's own routers.

The document is built as the API builds it, from every ``router/api/routes_*.py`` router,
without a database or a running server. Who may call each operation is written here, one
entry per operation: an operation without an entry, or an entry for an operation that is
gone, fails the build.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from fastapi import FastAPI
from mkdocs.exceptions import PluginError
from refs_markdown import paragraphs, prose, table

import router.api

TAG_ORDER = ("calls", "batches", "approvals", "tools", "route", "audit", "health")
ERROR_SHAPE = '`{"ok": false, "error": "…"}`'

WHO = {
    "POST /v1/calls": "Keys with the `agent` role.",
    "GET /v1/calls/{call_id}": "The key that submitted the call; operators.",
    "DELETE /v1/calls/{call_id}": "The key that submitted the call.",
    "POST /v1/batches": "Keys with the `agent` role.",
    "GET /v1/batches/{batch_id}": "The key that submitted the batch; operators.",
    "GET /v1/batches/{batch_id}/results": "The key that submitted the batch; operators.",
    "GET /v1/approvals": "Approvers (the requests they may decide); operators (all).",
    "GET /v1/approvals/{request_id}": "The request's approvers, its requester, operators.",
    "POST /v1/approvals/{request_id}/approve": (
        "A key holding one of the tool's approver roles, never the requesting key."
    ),
    "POST /v1/approvals/{request_id}/deny": (
        "A key holding one of the tool's approver roles, never the requesting key."
    ),
    "GET /v1/tools": "Any key.",
    "GET /v1/tools/{name}": "Any key.",
    "GET /v1/tools/{name}/stats": "Any key.",
    "POST /v1/route": "Keys with the `agent` role.",
    "GET /v1/audit": "Operators and admins.",
    "GET /v1/audit/verify": "Operators and admins.",
    "GET /v1/notifications": "Operators and admins.",
    "GET /metrics": "Anyone; no key.",
    "GET /healthz": "Anyone; no key.",
    "GET /readyz": "Anyone; no key.",
}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of every ``routes_*`` router, as the API serves it."""
    app = FastAPI(title="toolrouter", version="1")
    for module in sorted(pkgutil.iter_modules(router.api.__path__), key=lambda m: m.name):
        if module.name.startswith("routes_"):
            app.include_router(importlib.import_module(f"router.api.{module.name}").router)
    return app.openapi()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(method, path, operation)`` grouped by tag in ``TAG_ORDER``, in document order."""
    found = [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]

    def rank(entry: tuple[str, str, dict[str, Any]]) -> int:
        tag = (entry[2].get("tags") or [""])[0]
        return TAG_ORDER.index(tag) if tag in TAG_ORDER else len(TAG_ORDER)

    return sorted(found, key=rank)


def http_reference() -> str:
    document = openapi_document()
    schemas = document.get("components", {}).get("schemas", {})
    listed = operations(document)
    names = {f"{method} {path}" for method, path, _ in listed}
    missing, stale = sorted(names - set(WHO)), sorted(set(WHO) - names)
    if missing or stale:
        raise PluginError(
            "docs/hooks/refs_http.py WHO must name exactly the API's operations: "
            f"without an entry {missing}, for no operation {stale}"
        )
    index = [
        (method, f"[`{path}`](#{_anchor(method, path)})", op["summary"])
        for method, path, op in listed
    ]
    parts = [table(("method", "path", "summary"), index)]
    parts += [_operation(method, path, op, schemas) for method, path, op in listed]
    return "\n\n".join(parts)


def _anchor(method: str, path: str) -> str:
    words = "".join(c if c.isalnum() else "-" for c in f"{method} {path}".lower())
    return "-".join(part for part in words.split("-") if part)


def _operation(method: str, path: str, op: dict[str, Any], schemas: dict[str, Any]) -> str:
    where = f"{method} {path}"
    parts = [f"## `{method} {path}` {{#{_anchor(method, path)}}}", f"**{op['summary']}.**"]
    if op.get("description"):
        parts.append(paragraphs(op["description"], where=where))
    parts.append(f"**Who:** {WHO[where]}")
    parameters = op.get("parameters") or []
    if parameters:
        header: tuple[str, ...] = ("name", "in", "type", "required", "default")
        rows: list[tuple[str, ...]] = [
            (
                f"`{p['name']}`",
                p["in"],
                _type(p.get("schema", {}), schemas),
                "yes" if p.get("required") else "no",
                _default(p.get("schema", {})),
            )
            for p in parameters
        ]
        if any(p.get("description") for p in parameters):
            header += ("description",)
            rows = [
                (*row, prose(p.get("description", ""), where=f"{where} {p['name']}"))
                for row, p in zip(rows, parameters, strict=True)
            ]
        parts += ["**Parameters**", table(header, rows)]
    body = op.get("requestBody")
    if body:
        required = "required" if body.get("required") else "optional"
        for media, content in body.get("content", {}).items():
            parts.append(f"**Request body** (`{media}`, {required})")
            parts.append(_content(content, schemas))
    responses = op.get("responses", {})
    for code in sorted(c for c in responses if c.startswith("2")):
        answer = responses[code]
        contents = dict(answer.get("content") or {})
        if len(contents) > 1 and not contents.get("application/json", {}).get("schema"):
            # FastAPI's default media type, beside the one the route declares.
            contents.pop("application/json", None)
        for media, content in contents.items():
            parts.append(f"**Answer {code}** (`{media}`)")
            parts.append(_content(content, schemas, answer.get("description")))
    errors = sorted(c for c in responses if not c.startswith("2"))
    if errors:
        parts.append(f"**Errors:** {', '.join(errors)}, each {ERROR_SHAPE}.")
    return "\n\n".join(parts)


def _content(
    content: dict[str, Any], schemas: dict[str, Any], description: str | None = None
) -> str:
    """One media type of a body or an answer: its schema, or the schema of each line."""
    if "itemSchema" in content:
        return "One JSON object a line:\n\n" + _shape(content["itemSchema"], schemas, description)
    return _shape(content.get("schema", {}), schemas, description)


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """A schema's name and body: a component's, or a model's written in place (its title)."""
    ref = schema.get("$ref")
    if not ref:
        title = schema.get("title")
        return (title if isinstance(title, str) and title.isidentifier() else None), schema
    name = ref.rsplit("/", 1)[-1]
    if name in schemas:
        return name, schemas[name]
    raise PluginError(f"the OpenAPI document refers to {ref}, which it does not define")


def _shape(schema: dict[str, Any], schemas: dict[str, Any], description: str | None = None) -> str:
    """An object schema as a table of its fields; anything else in a sentence."""
    name, resolved = _resolve(schema, schemas)
    properties = resolved.get("properties")
    alternatives = [_component(option) for option in resolved.get("anyOf") or []]
    if not properties and alternatives and all(alternatives):
        # One of several models (a call result, or a dry run's answer): each described.
        parts = ["One of " + " and ".join(f"`{inner}`" for inner in alternatives) + "."]
        parts += [
            _shape({"$ref": f"#/components/schemas/{inner}"}, schemas) for inner in alternatives
        ]
        return "\n\n".join(parts)
    if not properties:
        if description and description != "Successful Response":
            return f"{description}."
        if resolved.get("type") == "object" or not resolved:
            return "A JSON object; its fields are not declared in the OpenAPI document."
        return f"{_type(resolved, schemas)}."
    required = set(resolved.get("required", []))
    rows = [
        (
            f"`{field}`",
            _type(spec, schemas),
            "yes" if field in required else "no",
            prose(spec.get("description", ""), where=f"{name}.{field}"),
        )
        for field, spec in properties.items()
    ]
    sentences = [f"`{name}`: a JSON object." if name else "A JSON object."]
    if resolved.get("description"):
        sentences.append(prose(resolved["description"], where=str(name)))
    one_of = _one_of_required(resolved)
    if one_of:
        sentences.append("Exactly one of " + " and ".join(f"`{f}`" for f in one_of) + ".")
    if resolved.get("additionalProperties") is False:
        sentences.append("Other fields are refused.")
    text = " ".join(sentences) + "\n\n" + table(("field", "type", "required", "description"), rows)
    # The components its fields name, each described once after it.
    nested = [
        _component(option)
        for spec in properties.values()
        for option in [spec, *(spec.get("anyOf") or [])]
    ]
    for inner in dict.fromkeys(n for n in nested if n and n != name):
        text += "\n\n" + _shape({"$ref": f"#/components/schemas/{inner}"}, schemas)
    return text


def _component(spec: dict[str, Any]) -> str | None:
    """The component a field holds (or holds an array of), by name."""
    ref = spec.get("$ref") or spec.get("items", {}).get("$ref")
    return ref.rsplit("/", 1)[-1] if ref else None


def _one_of_required(schema: dict[str, Any]) -> list[str]:
    """The fields of ``oneOf: [{required: [a]}, {required: [b]}]``: exactly one is given."""
    options = schema.get("oneOf") or []
    fields = [option.get("required") for option in options]
    if fields and all(
        isinstance(f, list) and len(f) == 1 and len(o) == 1
        for f, o in zip(fields, options, strict=True)
    ):
        return [f[0] for f in fields]
    return []


def _type(schema: dict[str, Any], schemas: dict[str, Any]) -> str:
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[-1]}`"
    name, _ = _resolve(schema, schemas)
    if name and schema.get("properties"):
        return f"`{name}`"
    if "anyOf" in schema:
        kinds = [_type(option, schemas) for option in schema["anyOf"]]
        return " or ".join(kinds)
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}), schemas)}"
    values = schema.get("additionalProperties")
    if kind == "object" and isinstance(values, dict) and values:
        return f"object of {_type(values, schemas)} values"
    bounds = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤")):
        if key in schema:
            bounds.append(f"{sign} {_number(schema[key])}")
    if "maxLength" in schema:
        bounds.append(f"at most {schema['maxLength']} characters")
    text = str(kind) if kind else "any JSON"
    return f"{text} ({', '.join(bounds)})" if bounds else text


def _number(value: float) -> str:
    """A bound as written: whole numbers in full (``9,007,199,254,740,992``), never ``9e+15``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else f"{value:g}"


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema or schema["default"] is None:
        return ""
    return f"`{schema['default']}`"
