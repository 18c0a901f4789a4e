"""Field tables for the pydantic models a user writes: settings and the tool config.

A field's description is, in order: its pydantic ``description``; the comment lines
directly above it in the model's source; a comment at the end of its line; else a note in
``refs_notes``. A field with none of these fails the build, and so does a note for a field
the model no longer has or that its source now describes itself: one place says what a
field means.
"""

from __future__ import annotations

import ast
import inspect
import io
import tokenize
import types
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from mkdocs.exceptions import PluginError
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from refs_markdown import prose, table

NOTES_FILE = "docs/hooks/refs_notes.py"

_TYPE_NAMES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    Path: "path",
    SecretStr: "string (secret)",
    Any: "any",
}


@cache
def _comments(path: Path) -> tuple[dict[int, str], dict[int, str]]:
    """Comments of one file by line: those alone on their line, and those after code."""
    alone: dict[int, str] = {}
    after: dict[int, str] = {}
    text = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        body = token.string.lstrip("#").strip()
        (alone if token.line.strip().startswith("#") else after)[token.start[0]] = body
    return alone, after


def source_comments(path: Path, class_name: str) -> dict[str, str]:
    """What the source says about each annotated field of ``class_name``: the comment
    lines directly above it, else a comment at the end of its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name]
    if len(classes) != 1:
        raise PluginError(f"{path}: expected one class {class_name}, found {len(classes)}")
    alone, after = _comments(path)
    found: dict[str, str] = {}
    for statement in classes[0].body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        lines: list[str] = []
        line = statement.lineno - 1
        while line in alone:
            lines.insert(0, alone[line])
            line -= 1
        if not lines and statement.end_lineno in after:
            lines = [after[statement.end_lineno]]
        if lines:
            found[statement.target.id] = " ".join(lines)
    return found


def documented_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The fields a user can set: every field but those excluded from the model's dump."""
    return {name: field for name, field in model.model_fields.items() if not field.exclude}


def descriptions(model: type[BaseModel], notes: Mapping[str, str]) -> dict[str, str]:
    """Every documented field's description; raises if one has none (see the module)."""
    source = inspect.getsourcefile(model)
    if source is None:
        raise PluginError(f"no source file for {model.__qualname__}")
    path = Path(source)
    where = f"{model.__module__}.{model.__qualname__}"
    comments = source_comments(path, model.__name__)
    fields = documented_fields(model)
    stale = sorted(set(notes) - set(fields))
    if stale:
        raise PluginError(f"{NOTES_FILE} has notes for fields {where} does not have: {stale}")
    found: dict[str, str] = {}
    for name, field in fields.items():
        own = field.description or comments.get(name)
        note = notes.get(name)
        if own and note:
            raise PluginError(
                f"{where}.{name} is described in {path.name} now: delete its note in {NOTES_FILE}"
            )
        if not own and not note:
            raise PluginError(
                f"{where}.{name} has no description: write a comment above it in {path.name} "
                "(or give it a pydantic description), so the reference can say what it is"
            )
        found[name] = prose(own or note or "", where=f"{where}.{name}")
    return found


def type_name(annotation: Any, link: Callable[[type[BaseModel]], str]) -> str:
    """A field's type in a user's words (``integer``, ``list of strings``, a model's link)."""
    if annotation in _TYPE_NAMES:
        return _TYPE_NAMES[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return link(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0], link)
    if origin is Literal:
        names = [f"`{value}`" for value in args]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    if origin in (Union, types.UnionType):
        named = [type_name(arg, link) for arg in args if arg is not type(None)]
        text = " or ".join(named)
        return f"{text}, or unset" if type(None) in args else text
    if origin in (tuple, list):
        inner = type_name(args[0], link) if args else "any"
        return f"list of {_plural(inner)}"
    if origin is dict:
        inner = type_name(args[1], link) if len(args) == 2 else "any"
        if inner == "any":
            return "mapping"
        return f"mapping of {_plural(inner)}"
    raise PluginError(f"no reference name for the type {annotation!r}: add it to refs_fields")


def _plural(name: str) -> str:
    """``string`` → ``strings``, ``list of strings`` → ``lists of strings``: the first word
    only, once; a model's link, or a choice of literals, as it is."""
    if name.startswith(("[", "`")):
        return name
    if name == "any":
        return "values of any type"
    head, _, rest = name.partition(" ")
    return f"{head}s {rest}" if rest else f"{head}s"


def constraints(field: FieldInfo) -> str:
    """Bounds and patterns pydantic checks, as ``≥ 1, ≤ 64``."""
    parts: list[str] = []
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            parts.append(f"≥ {_number(item.ge)}")
        elif isinstance(item, annotated_types.Gt):
            parts.append(f"> {_number(item.gt)}")
        elif isinstance(item, annotated_types.Le):
            parts.append(f"≤ {_number(item.le)}")
        elif isinstance(item, annotated_types.Lt):
            parts.append(f"< {_number(item.lt)}")
        elif isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length} characters")
        elif getattr(item, "pattern", None):
            parts.append(f"matching `{item.pattern}`")
    return ", ".join(parts)


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def default_text(field: FieldInfo) -> str:
    """The default as a user would write it; ``required`` when there is none."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, Path):
        value = str(value)
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, tuple | list | dict):
        flow = yaml.safe_dump(_plain(value), default_flow_style=True, sort_keys=False)
        return f"`{flow.strip()}`"
    return f"`{value}`"


def _plain(value: Any) -> Any:
    """Tuples as lists and integral floats as integers, for YAML."""
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def field_table(
    model: type[BaseModel],
    notes: Mapping[str, str],
    *,
    key_header: str,
    key: Callable[[str, FieldInfo], str],
    link: Callable[[type[BaseModel]], str],
) -> str:
    """One row per documented field: key, type with its bounds, default, description."""
    described = descriptions(model, notes)
    rows = []
    for name, field in documented_fields(model).items():
        kind = type_name(field.annotation, link)
        bounds = constraints(field)
        rows.append(
            (
                key(name, field),
                f"{kind}; {bounds}" if bounds else kind,
                default_text(field),
                described[name],
            )
        )
    return table((key_header, "type", "default", "description"), rows)
