"""The ``llm`` routing strategy's client (``LlmSelector``) against a local chat completions
server: what it sends, how it reorders the shortlist, and how each way a model endpoint
fails becomes ``LlmFailed`` with a reason that never carries the key."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from router.tools.config import parse_config
from router.tools.registry import Tool, ToolRegistry
from router.tools.selection.candidates import Candidate
from router.tools.selection.llm import LlmEndpoint, LlmFailed, LlmSelector

from ..support.chat_server import (
    PATH,
    ChatServer,
    Reply,
    fails,
    names,
    raw,
    says,
    slow,
)
from ..support.launcher import free_port

KEY = "sk-test-0123456789-secret"
LONG = "Long " + "x" * 400
CATALOGUE = f"""
tools:
  - {{name: web_search, handler: "tests.fixture_tools:echo",
     description: Search the web for current news and pages}}
  - {{name: calculator, handler: "tests.fixture_tools:echo",
     description: Calculate sums averages and other math}}
  - {{name: file_reader, handler: "tests.fixture_tools:echo",
     description: Read and extract text from attached documents}}
  - {{name: weather, handler: "tests.fixture_tools:echo",
     description: Current weather and forecast for a city}}
  - {{name: long_winded, handler: "tests.fixture_tools:echo", description: {LONG}}}
"""
NOT_CHOSEN = "in the shortlist, not chosen by the model"
NOT_A_LIST = "the model's answer is not a chat completion with a tool list"


@pytest.fixture(scope="module")
def shortlist() -> list[Tool]:
    """The catalogue's tools in a fixed order, as the default ranking might give them."""
    registry = ToolRegistry.from_config(parse_config(CATALOGUE, file="catalogue.yaml", env={}))
    order = ["web_search", "calculator", "file_reader", "weather", "long_winded"]
    return [tool for tool in map(registry.get, order) if tool is not None]


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    with ChatServer() as chat:
        yield chat


@pytest.fixture
def chat(server: ChatServer) -> ChatServer:
    server.reset()
    return server


def selector(url: str, key: str = KEY, timeout_s: float = 5.0) -> LlmSelector:
    return LlmSelector(LlmEndpoint(url=url, key=key, model="test-model", timeout_s=timeout_s))


def rerank(
    chat: ChatServer, shortlist: list[Tool], task: str, key: str = KEY, timeout_s: float = 5.0
) -> list[Candidate]:
    llm = selector(chat.url, key, timeout_s)
    try:
        return llm.rerank(task, shortlist)
    finally:
        llm.close()


def failure(chat: ChatServer, reply: Reply, shortlist: list[Tool], timeout_s: float = 5.0) -> str:
    """The reason ``rerank`` fails with when the server answers ``reply``; it names no key."""
    chat.reset(reply)
    with pytest.raises(LlmFailed) as failed:
        rerank(chat, shortlist, "calculate the average", timeout_s=timeout_s)
    reason = str(failed.value)
    assert KEY not in reason and KEY not in repr(failed.value)
    # Nothing chained that a log's traceback would show: the request, with its headers.
    assert failed.value.__cause__ is None
    assert failed.value.__context__ is None or failed.value.__suppress_context__
    return reason


def test_the_request_is_a_chat_completion_listing_the_task_and_every_tool(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    rerank(chat, shortlist, "what is the weather in Paris today?")
    [seen] = chat.requests
    assert (seen.method, seen.target) == ("POST", PATH)
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    body = seen.json()
    assert body["model"] == "test-model" and body["temperature"] == 0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    [prompt] = chat.prompts()
    assert '{"tools": ["name", ...]}' in prompt.system
    assert prompt.task == "what is the weather in Paris today?"
    assert prompt.tool_names == [t.name for t in shortlist]
    described = dict(prompt.tools)
    assert described["calculator"] == "Calculate sums averages and other math"
    # Descriptions are cut, so one long one cannot crowd out the rest of the prompt.
    assert described["long_winded"] == LONG[:300]
    assert KEY not in json.dumps(body)


def test_no_key_means_no_authorization_header(chat: ChatServer, shortlist: list[Tool]) -> None:
    rerank(chat, shortlist, "calculate the average", key="")
    [seen] = chat.requests
    assert "authorization" not in seen.headers


def test_a_base_url_with_a_trailing_slash_reaches_the_same_path(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    llm = selector(chat.url + "/")
    try:
        llm.rerank("calculate the average", shortlist)
    finally:
        llm.close()
    assert [seen.target for seen in chat.requests] == [PATH]


def test_the_models_choices_come_first_then_the_rest_in_shortlist_order(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    chat.reset(names("file_reader", "calculator"))
    ranked = rerank(chat, shortlist, "read the numbers from this document and add them")
    assert ranked == [
        Candidate("file_reader", 1.0, "chosen by the model, 1 of 2"),
        Candidate("calculator", 0.5, "chosen by the model, 2 of 2"),
        Candidate("web_search", 0.0, NOT_CHOSEN),
        Candidate("weather", 0.0, NOT_CHOSEN),
        Candidate("long_winded", 0.0, NOT_CHOSEN),
    ]


def test_the_word_model_picks_what_the_task_talks_about(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    ranked = rerank(chat, shortlist, "current weather forecast for Lyon")
    [picked] = chat.answered
    assert picked[0] == "weather"
    assert [c.tool for c in ranked[: len(picked)]] == picked
    assert sorted(c.tool for c in ranked) == sorted(t.name for t in shortlist)


def test_names_not_listed_repeated_or_not_strings_are_dropped(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    chat.reset(says('{"tools": ["teleport", "weather", 7, "weather", null, "web_search"]}'))
    ranked = rerank(chat, shortlist, "anything")
    assert [(c.tool, c.reason) for c in ranked[:2]] == [
        ("weather", "chosen by the model, 1 of 2"),
        ("web_search", "chosen by the model, 2 of 2"),
    ]
    assert [c.tool for c in ranked[2:]] == ["calculator", "file_reader", "long_winded"]


def test_an_answer_in_a_code_fence_after_prose_is_read(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    chat.reset(names("calculator", "web_search", fenced=True))
    ranked = rerank(chat, shortlist, "calculate the average")
    assert [c.tool for c in ranked[:2]] == ["calculator", "web_search"]


def test_an_empty_shortlist_asks_nothing(chat: ChatServer) -> None:
    assert rerank(chat, [], "anything") == []
    assert chat.requests == []


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (fails(500), "the model endpoint answered HTTP 500"),
        (fails(401), "the model endpoint answered HTTP 401"),
        (fails(429), "the model endpoint answered HTTP 429"),
        (raw(b"<html><body>502 Bad Gateway</body></html>"), NOT_A_LIST),
        (raw(b'{"object": "list", "data": []}'), NOT_A_LIST),
        (says("I would use the calculator for this."), NOT_A_LIST),
        (says('{"tools": "calculator"}'), NOT_A_LIST),
        (says('{"choice": ["calculator"]}'), NOT_A_LIST),
        (says('{"tools": ["calculator"'), NOT_A_LIST),
        (raw(json.dumps({"choices": [{"message": {"content": None}}]}).encode()), NOT_A_LIST),
        (raw(json.dumps({"choices": []}).encode()), NOT_A_LIST),
        (raw(b"[" * 60_000), NOT_A_LIST),
        (says('{"tools":' + "[" * 30_000), NOT_A_LIST),
        (says('{"a":' * 5_000), NOT_A_LIST),
        (says('{"tools": []}'), "the model named none of the listed tools"),
        (names("teleport", "summon"), "the model named none of the listed tools"),
    ],
    ids=[
        "http-500",
        "http-401",
        "http-429",
        "html",
        "json-not-a-completion",
        "prose",
        "tools-not-a-list",
        "no-tools-field",
        "cut-short",
        "null-content",
        "no-choices",
        "nested-body",
        "nested-tools",
        "nested-objects",
        "empty-list",
        "unlisted-names",
    ],
)
def test_an_unusable_answer_is_a_failure_with_its_reason(
    chat: ChatServer, shortlist: list[Tool], reply: Reply, reason: str
) -> None:
    assert failure(chat, reply, shortlist) == reason


def test_an_answer_later_than_the_timeout_is_a_failure(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    # The server would answer after 5 s; the selector gives up after 0.5 s.
    reason = failure(chat, slow(5), shortlist, timeout_s=0.5)
    assert reason == "the model did not answer within 0.5 s"


def test_an_endpoint_nobody_listens_on_is_a_failure(shortlist: list[Tool]) -> None:
    llm = selector(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(LlmFailed) as failed:
        llm.rerank("calculate the average", shortlist)
    llm.close()
    assert str(failed.value) == "the model endpoint cannot be reached (ConnectError)"
    assert KEY not in str(failed.value)


def test_an_answer_trickled_out_past_the_timeout_is_a_failure(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    # A short completion, a byte every 30 ms: about 2 s in all, no pause longer than 0.5 s.
    body = json.dumps({"choices": [{"message": {"content": '{"tools":["calculator"]}'}}]})
    reason = failure(chat, Reply(body=body.encode(), trickle_s=0.03), shortlist, timeout_s=0.5)
    assert reason == "the model did not answer within 0.5 s"


@pytest.mark.parametrize(
    "content",
    [
        '<think>The task wants {math}; the calculator fits.</think>\n{"tools": ["calculator"]}',
        '{"tools": ["calculator"]}\nI left out {web_search}: the task needs no search.',
    ],
    ids=["braces-before", "braces-after"],
)
def test_the_tool_list_is_found_among_prose_with_braces(
    chat: ChatServer, shortlist: list[Tool], content: str
) -> None:
    chat.reset(says(content))
    assert rerank(chat, shortlist, "calculate the average")[0].tool == "calculator"


def test_the_key_is_never_in_the_endpoints_repr() -> None:
    endpoint = LlmEndpoint(url="http://127.0.0.1:1/v1", key=KEY)
    assert KEY not in repr(endpoint) and KEY not in repr(LlmSelector(endpoint).endpoint)


def test_a_task_that_is_not_text_fails_before_anything_is_sent(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    chat.reset()
    with pytest.raises(LlmFailed, match="cannot be reached"):
        rerank(chat, shortlist, "weather \ud800 now")
    assert chat.requests == []


def test_routes_past_the_concurrency_limit_fail_at_once(
    chat: ChatServer, shortlist: list[Tool]
) -> None:
    llm = LlmSelector(LlmEndpoint(url=chat.url, key=KEY, concurrency=1))
    assert llm._slots.acquire(blocking=False)  # one route is asking the model
    try:
        with pytest.raises(LlmFailed, match="already asked by 1 routes"):
            llm.rerank("calculate the average", shortlist)
    finally:
        llm._slots.release()
        llm.close()
    assert chat.requests == []
