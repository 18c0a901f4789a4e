"""Registration fails fast: every config mistake names the file, the tool and the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from router.errors import ConfigError
from router.tools.config import ToolSpec, load_config, parse_config
from router.tools.registry import ToolRegistry, build_tool

from ..support.stack import TEST_CONFIG

GOOD = 'tools:\n  - {name: echo, handler: "tests.fixture_tools:echo"}\n'


def registry_from(text: str, env: dict[str, str] | None = None) -> ToolRegistry:
    return ToolRegistry.from_config(parse_config(text, file="t.yaml", env=env or {}), file="t.yaml")


def config_error(text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        registry_from(text, env)
    return caught.value


def test_a_good_config_registers_its_tools() -> None:
    registry = registry_from(GOOD)
    assert [tool.name for tool in registry] == ["echo"]
    tool = registry.get("echo")
    assert tool is not None
    assert tool.queue == "tools.low"
    assert tool.spec.gated is False


def test_high_risk_is_gated_by_default_and_others_are_not() -> None:
    registry = registry_from(
        "tools:\n"
        '  - {name: a, handler: "tests.fixture_tools:echo", risk: high}\n'
        '  - {name: b, handler: "tests.fixture_tools:echo", risk: medium}\n'
        '  - {name: c, handler: "tests.fixture_tools:echo", risk: low, requires_approval: true}\n'
        '  - {name: d, handler: "tests.fixture_tools:echo", risk: high, requires_approval: false}\n'
    )
    gated = {tool.name: tool.spec.gated for tool in registry}
    assert gated == {"a": True, "b": False, "c": True, "d": False}


@pytest.mark.parametrize(
    ("text", "tool", "reason"),
    [
        (
            GOOD + '  - {name: echo, handler: "tests.fixture_tools:echo"}\n',
            "echo",
            "duplicate tool name",
        ),
        (
            'tools:\n  - {name: toolrouter.call_status, handler: "tests.fixture_tools:echo"}\n',
            "toolrouter.call_status",
            "reserved name: toolrouter's MCP server offers its own tool of this name",
        ),
        (
            'tools:\n  - {name: "bad name!", handler: "tests.fixture_tools:echo"}\n',
            "bad name!",
            "bad name",
        ),
        (
            'tools:\n  - {name: "echo\\n", handler: "tests.fixture_tools:echo"}\n',
            "echo\n",
            "bad name",
        ),
        (
            'tools:\n  - {name: "' + "x" * 65 + '", handler: "tests.fixture_tools:echo"}\n',
            "x" * 65,
            "bad name",
        ),
        (
            'tools:\n  - {name: e, handler: "tests.fixture_tools:echo", colour: red}\n',
            "e",
            "colour: unknown key",
        ),
        (
            'tools:\n  - {name: e, handler: "tests.fixture_tools:echo", risk: extreme}\n',
            "e",
            "risk",
        ),
        (
            'tools:\n  - {name: e, handler: "tests.fixture_tools:nope"}\n',
            "e",
            "unresolvable handler",
        ),
        ('tools:\n  - {name: e, handler: "no_such_module:f"}\n', "e", "unresolvable handler"),
        (
            'tools:\n  - {name: e, handler: "tests.fixture_tools:echo",'
            " input_schema: {type: 12}}\n",
            "e",
            "invalid JSON Schema",
        ),
        (
            'tools:\n  - {name: e, handler: "tests.fixture_tools:echo", fallbacks: [zz]}\n',
            "e",
            "unknown fallback: zz",
        ),
        (
            'tools:\n  - {name: e, handler: "tests.fixture_tools:echo", fallbacks: [e]}\n',
            "e",
            "fallback e is the tool itself",
        ),
        (
            'tools:\n  - {name: e, handler: "tests.fixture_tools:echo", url: "${NOPE}"}\n',
            "e",
            "url: environment variable NOPE is not set",
        ),
        (
            'tools:\n  - {name: e, handler: {http: {url: "http://x", headers: {A: "${NOPE}"}}}}\n',
            "e",
            "handler.http.headers.A: environment variable NOPE is not set",
        ),
    ],
)
def test_config_mistakes_name_file_tool_and_reason(text: str, tool: str, reason: str) -> None:
    error = config_error(text)
    assert error.file == "t.yaml"
    assert error.tool == tool
    assert reason in error.reason
    assert "t.yaml" in str(error) and reason in str(error)


WEATHER = GOOD + '  - {name: weather, handler: "tests.fixture_tools:echo"}\nrouting:\n  rules:\n'


@pytest.mark.parametrize(
    ("rules", "reason"),
    [
        (
            '    - {pattern: "weather(|forecast", tool: weather}\n',
            "routing.rules[0].pattern: not a regular expression:"
            " missing ), unterminated subpattern at position 7",
        ),
        ("    - {patern: weather, tool: weather}\n", "routing.rules[0].patern: unknown key"),
        ("    - {pattern: weather}\n", "routing.rules[0].tool: Field required"),
        (
            "    - {pattern: weather, tool: weather, priority: high}\n",
            "routing.rules[0].priority: Input should be a valid integer,"
            " unable to parse string as an integer",
        ),
        (
            "    - {pattern: echo, tool: echo}\n    - {pattern: weather, tool: wether}\n",
            "routing.rules[1].tool: unknown tool: wether (did you mean weather?)",
        ),
        ("    []\n  ordre: [weather]\n", "routing.ordre: unknown key"),
    ],
)
def test_routing_rule_mistakes_are_config_errors_naming_the_rule(rules: str, reason: str) -> None:
    error = config_error(WEATHER + rules)
    assert str(error) == f"config error (file t.yaml): {reason}"


def test_unknown_top_level_key_is_a_config_error() -> None:
    error = config_error("tools: []\nextras: 1\n")
    assert "unknown key: extras" in str(error)
    # Beside toolrouter's own keys, an MCP client's key is no licence for unknown ones.
    error = config_error("tools: []\nmcpServers: {}\nextras: 1\n")
    assert "unknown key: extras" in str(error)


def test_an_mcp_clients_own_file_is_read_for_its_servers_alone() -> None:
    """Claude Desktop's file holds the app's settings beside its servers."""
    config = parse_config('{"mcpServers": {}, "globalShortcut": "Ctrl+Space"}', file="c.json")
    assert list(config.tools) == []


def test_environment_variables_are_interpolated() -> None:
    config = parse_config(
        'tools:\n  - {name: e, handler: "tests.fixture_tools:echo", description: "to ${WHO}"}\n',
        file="t.yaml",
        env={"WHO": "you"},
    )
    assert config.tools[0].description == "to you"


def test_names_are_looked_up_in_a_mapping_not_through_attributes() -> None:
    registry = registry_from(GOOD)
    for name in [
        "__class__",
        "toString",
        "constructor",
        "__proto__",
        "celery.backend_cleanup",
        "__dict__",
        "get",
        "",
        None,
        12,
        ["echo"],
    ]:
        assert registry.get(name) is None
        assert name not in registry


def test_a_tool_named_like_an_attribute_is_found_when_registered() -> None:
    registry = registry_from('tools:\n  - {name: __class__, handler: "tests.fixture_tools:echo"}\n')
    tool = registry.get("__class__")
    assert tool is not None and tool.name == "__class__"


def test_without_a_config_file_the_built_in_example_is_used(tmp_path: Path) -> None:
    config = load_config(tmp_path / "missing.yaml")
    registry = ToolRegistry.from_config(config)
    assert {"echo", "add", "wire"} <= {tool.name for tool in registry}


def test_the_test_config_loads() -> None:
    assert len(ToolRegistry.from_config(load_config(TEST_CONFIG))) > 10


def test_argument_errors_are_sentences() -> None:
    registry = registry_from(
        'tools:\n  - name: s\n    handler: "tests.fixture_tools:echo"\n'
        "    input_schema: {type: object, required: [to], properties: {to: {type: string}}}\n"
    )
    tool = registry.get("s")
    assert tool is not None
    assert tool.argument_errors({"to": "x"}) is None
    assert tool.argument_errors({}) == "arguments: 'to' is a required property"
    assert tool.argument_errors({"to": 3}) == 'to: must satisfy type "string"'
    # The offending value never appears: it may be a secret, and the message is audited.
    assert "sk-live" not in (tool.argument_errors({"to": ["sk-live-123"]}) or "sk-live")


SCHEMAS_OF_ANY_OBJECT = [
    {"type": "object"},
    {"type": "object", "properties": {}},
    {"type": "object", "title": "t", "description": "d", "$comment": "c", "default": {}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "examples": [{}]},
    {"$id": "urn:t", "type": "object", "deprecated": True},
]
NARROWING_SCHEMAS = [
    {},
    {"type": ["object"]},
    {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "object", "required": ["a"]},
    {"type": "object", "additionalProperties": False},
    {"type": "object", "maxProperties": 1},
    {"type": "object", "propertyNames": {"maxLength": 1}},
    {"type": "object", "not": {"required": ["a"]}},
    {"type": "object", "$ref": "#/$defs/o", "$defs": {"o": {"required": ["a"]}}},
    {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
]
INSTANCES = [{}, {"a": 1}, {"a": "x", "b": [1]}, {"ab": None}, [], "x", 1, None]


@pytest.mark.parametrize("schema", SCHEMAS_OF_ANY_OBJECT + NARROWING_SCHEMAS, ids=str)
def test_a_schema_of_any_object_skips_the_validator_and_agrees_with_it(
    schema: dict[str, Any],
) -> None:
    tool = build_tool(
        ToolSpec(name="t", handler={"python": "tests.fixture_tools:echo"}, input_schema=schema),
        file="t.yaml",
    )
    assert tool.any_object == (schema in SCHEMAS_OF_ANY_OBJECT)
    for instance in INSTANCES:
        valid = tool.validator.is_valid(instance)
        assert (tool.argument_errors(instance) is None) == valid, instance


def test_python_tools_share_messages_and_http_tools_go_alone_unless_configured() -> None:
    registry = registry_from(
        "tools:\n"
        '  - {name: py, handler: "tests.fixture_tools:echo"}\n'
        '  - {name: py_alone, handler: "tests.fixture_tools:echo", calls_per_message: 1}\n'
        "  - {name: web, handler: {http: {url: 'http://127.0.0.1:9/x'}}}\n"
        "  - {name: web_shared, handler: {http: {url: 'http://127.0.0.1:9/x'}},"
        " calls_per_message: 4}\n"
    )
    per_message = {tool.name: tool.spec.max_calls_per_message for tool in registry}
    assert per_message == {"py": 8, "py_alone": 1, "web": 1, "web_shared": 4}
    assert "calls_per_message" in str(
        config_error(
            'tools:\n  - {name: a, handler: "tests.fixture_tools:echo", calls_per_message: 0}\n'
        )
    )
