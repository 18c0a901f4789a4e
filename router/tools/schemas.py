"""A tool's JSON Schemas, checked against the metaschema each names (or the latest)."""

from __future__ import annotations

from typing import Any

from jsonschema import exceptions, validators

from . import schema_regex, schema_unique

# Before any schema is checked or any arguments validated: no pattern ever backtracks,
# and no array's items are compared each with each.
schema_regex.install()
schema_unique.install()


def schema_problem(
    input_schema: dict[str, Any], output_schema: dict[str, Any] | None
) -> str | None:
    """Why a tool's schemas cannot check anything (an invalid keyword, a pattern that is no
    regular expression, or one that only backtracking can match), or None when both can."""
    try:
        validators.validator_for(input_schema).check_schema(input_schema)
        if output_schema is not None:
            validators.validator_for(output_schema).check_schema(output_schema)
    except exceptions.SchemaError as exc:
        return str(exc.message)
    except RecursionError:
        # An MCP server's schema may nest without a useful end.
        return "the schema nests too deeply to be checked"
    return schema_regex.pattern_problem([input_schema, output_schema])
