"""``POST /v1/route`` with ``strategy: llm`` through a real API whose LLM endpoint is a local
chat completions server: the model's order when it answers, the default ranking and a
``fallback`` sentence when it does not, and a 422 when no endpoint is configured."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from router.runtime import Runtime

from ..support import services
from ..support.chat_server import ChatServer, Reply, fails, names, slow
from ..support.stack import Stack, stack_env

KEY = "sk-stack-0123456789-secret"
SHORTLIST = 5
TASK = "search the web for a backup of the echo"
OFF = "strategy llm is not available: no LLM endpoint is configured (TOOLROUTER_ROUTE_LLM_URL)"


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def llm_stack(
    chat: ChatServer,
    redis_base: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """The API alone (routing needs no worker), its LLM endpoint the chat server."""
    state_dir = tmp_path_factory.mktemp("llm-stack")
    env = stack_env(
        database_url=services.fresh_sqlite_url(state_dir),
        redis_url=f"{redis_base}/{services.REDIS_DBS['sqlite']}",
        state_dir=state_dir,
        TOOLROUTER_ROUTE_LLM_URL=chat.url,
        TOOLROUTER_ROUTE_LLM_KEY=KEY,
        TOOLROUTER_ROUTE_LLM_MODEL="test-model",
        TOOLROUTER_ROUTE_LLM_TIMEOUT_S="1",
        TOOLROUTER_ROUTE_LLM_SHORTLIST=str(SHORTLIST),
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    runtime.prepare()
    stack.keys["agent"] = runtime.keys.create("agent", ["agent"])
    runtime.close()
    try:
        stack.start_api()
        yield stack
    finally:
        stack.stop_all()


def route(stack: Stack, **fields: Any) -> dict[str, Any]:
    with stack.client("agent") as http:
        answer = http.post("/v1/route", json=fields)
    assert answer.status_code == 200, answer.text
    assert KEY not in answer.text
    body: dict[str, Any] = answer.json()
    return body


def tools(answer: dict[str, Any]) -> list[str]:
    return [c["tool"] for c in answer["candidates"]]


def test_strategy_llm_answers_in_the_models_order(chat: ChatServer, llm_stack: Stack) -> None:
    by_default = tools(route(llm_stack, task=TASK, strategy="hybrid", limit=10))
    shortlist = by_default[:SHORTLIST]
    assert len(by_default) == 10
    chosen = [shortlist[3], shortlist[0]]
    chat.reset(names(*chosen))
    answer = route(llm_stack, task=TASK, strategy="llm")
    assert answer["strategy"] == "llm" and "fallback" not in answer
    # The shortlist in the model's order, then the default's order past it.
    reordered = chosen + [t for t in shortlist if t not in chosen]
    assert tools(answer) == reordered + by_default[SHORTLIST:]
    assert [c["reason"] for c in answer["candidates"][:2]] == [
        "chosen by the model, 1 of 2",
        "chosen by the model, 2 of 2",
    ]
    # The model was asked about the default strategy's shortlist, with the configured
    # model name and key.
    [seen] = chat.requests
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.json()["model"] == "test-model"
    [prompt] = chat.prompts()
    assert (prompt.task, prompt.tool_names) == (TASK, shortlist)


def test_strategy_llm_follows_the_word_model(chat: ChatServer, llm_stack: Stack) -> None:
    chat.reset()
    answer = route(llm_stack, task="backup web search", strategy="llm", limit=3)
    [picked] = chat.answered
    assert picked and picked[0] == "search_backup"
    assert answer["strategy"] == "llm"
    rest = [t for t in chat.prompts()[0].tool_names if t not in picked]
    assert tools(answer) == (picked + rest)[:3]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (fails(500), "the model endpoint answered HTTP 500"),
        (fails(401), "the model endpoint answered HTTP 401"),
        (names("teleport"), "the model named none of the listed tools"),
        (slow(5), "the model did not answer within 1 s"),
    ],
    ids=["http-500", "http-401", "unlisted-names", "too-slow"],
)
def test_when_the_model_fails_the_default_strategy_answers_and_says_why(
    chat: ChatServer, llm_stack: Stack, reply: Reply, reason: str
) -> None:
    chat.reset(reply)
    answer = route(llm_stack, task=TASK, strategy="llm", limit=4)
    assert len(chat.requests) == 1
    assert answer["ok"] is True and answer["strategy"] == "hybrid"
    assert answer["fallback"] == f"strategy llm failed: {reason}; ranked by hybrid instead"
    hybrid = route(llm_stack, task=TASK, strategy="hybrid", limit=4)
    assert answer["candidates"] == hybrid["candidates"]


# The suite's shared stack (no LLM endpoint), on SQLite only: the refusal is the API's.
@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
def test_strategy_llm_without_an_endpoint_is_refused(stack: Stack) -> None:
    with stack.client("agent") as http:
        refused = http.post("/v1/route", json={"task": TASK, "strategy": "llm"})
    assert refused.status_code == 422
    assert refused.json()["error"] == OFF


def test_strategy_llm_with_only_a_capability_asks_about_that_capabilitys_tools(
    chat: ChatServer, llm_stack: Stack
) -> None:
    chat.reset(names("search_backup"))
    answer = route(llm_stack, capability="search.web", strategy="llm")
    assert answer["strategy"] == "llm" and "fallback" not in answer
    [prompt] = chat.prompts()
    assert set(prompt.tool_names) == {"search_primary", "search_backup"}
    assert tools(answer) == ["search_backup", "search_primary"]
