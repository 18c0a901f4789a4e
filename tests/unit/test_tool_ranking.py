"""The text strategies on a small fixed catalogue: stemmed BM25, embeddings, their fusion."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from router.errors import BadRequest
from router.tools.config import parse_config
from router.tools.registry import ToolRegistry
from router.tools.routing import Candidate, Strategy, route, strategy_named
from router.tools.selection.index import ToolIndex
from router.tools.selection.semantic import Embeddings
from router.tools.selection.text import Analyzer

CATALOGUE = """
tools:
  - {name: echo, handler: "tests.fixture_tools:echo", description: Echo the arguments back}
  - {name: calculator, handler: "tests.fixture_tools:echo",
     description: Calculate and compute arithmetic sums and averages, capabilities: [math.eval]}
  - {name: getWeatherForecast, handler: "tests.fixture_tools:echo",
     description: Conditions ahead for a place, capabilities: [weather.read],
     input_schema: {type: object, properties: {city: {type: string, description: Town name}}}}
  - {name: send_email, handler: "tests.fixture_tools:echo",
     description: Deliver a message to a mailbox, capabilities: [mail.send]}
  - {name: mail_archive, handler: "tests.fixture_tools:echo",
     description: Store old messages, capabilities: [mail.send]}
"""


@pytest.fixture(scope="module")
def catalogue() -> ToolRegistry:
    return ToolRegistry.from_config(parse_config(CATALOGUE, file="catalogue.yaml", env={}))


@pytest.fixture(scope="module")
def index(catalogue: ToolRegistry) -> ToolIndex:
    return ToolIndex(list(catalogue))


def names(candidates: list[Candidate]) -> list[str]:
    return [c.tool for c in candidates]


def test_words_are_split_stemmed_and_stop_words_dropped() -> None:
    analyzer = Analyzer()
    assert [t.word for t in analyzer.terms("getWeather of the HTTPServer, get_time")] == [
        "get",
        "weather",
        "http",
        "server",
        "get",
        "time",
    ]
    assert analyzer.stems("averages") == analyzer.stems("average")
    # Words of other scripts stay whole rather than split at each non-ASCII letter.
    assert [t.word for t in analyzer.terms("¿Qué tiempo hace en Zürich?")] == [
        "qué",
        "tiempo",
        "hace",
        "en",
        "zürich",
    ]


def test_stop_words_no_longer_rank_a_short_description_first(index: ToolIndex) -> None:
    ranked = index.lexical("compute the average of these numbers")
    assert names(ranked) == ["calculator"]
    assert ranked[0].reason == "matches average, compute"


def test_identifiers_and_parameter_names_are_searchable(index: ToolIndex) -> None:
    assert names(index.lexical("weather forecast"))[0] == "getWeatherForecast"
    assert names(index.lexical("which city"))[0] == "getWeatherForecast"
    assert names(index.lexical("email")) == ["send_email"]
    assert index.lexical("the of and") == []


def test_semantic_finds_a_tool_that_shares_no_word_with_the_task(index: ToolIndex) -> None:
    assert index.lexical("will it rain in Paris tomorrow") == []
    ranked = index.semantic("will it rain in Paris tomorrow")
    assert ranked[0].tool == "getWeatherForecast"
    assert ranked[0].reason.startswith("similarity ")
    assert ranked[0].score > ranked[1].score
    assert index.semantic("   ") == []


def test_hybrid_fuses_both_rankings_and_explains_each(index: ToolIndex) -> None:
    ranked = index.hybrid("compute the average of these numbers")
    assert ranked[0].tool == "calculator"
    assert ranked[0].reason.startswith("matches average, compute; similarity ")
    # A tool only the embedding finds still ranks, with the similarity as its reason.
    assert names(index.hybrid("will it rain in Paris tomorrow"))[0] == "getWeatherForecast"


def test_a_capability_narrows_every_text_strategy(
    catalogue: ToolRegistry, index: ToolIndex
) -> None:
    for strategy in (Strategy.LEXICAL, Strategy.SEMANTIC, Strategy.HYBRID):
        ranked = route(
            catalogue, task="send a message", strategy=strategy, capability="mail.send", index=index
        )
        assert set(names(ranked)) <= {"send_email", "mail_archive"}, strategy
        assert ranked, strategy


def test_limit_keeps_the_best(index: ToolIndex) -> None:
    everything = index.semantic("mail")
    assert index.semantic("mail", limit=2) == everything[:2]


def test_strategies_are_named_exactly() -> None:
    assert strategy_named(None) == Strategy.HYBRID
    assert strategy_named("lexical") == Strategy.LEXICAL
    with pytest.raises(BadRequest, match="unknown strategy: magic; use one of lexical, "):
        strategy_named("magic")


def test_tool_embeddings_are_computed_once_per_text(catalogue: ToolRegistry) -> None:
    embeddings = Embeddings()
    first = ToolIndex(list(catalogue), embeddings)
    first.semantic("mail")
    cached = dict(embeddings._by_text)
    second = ToolIndex(list(catalogue), embeddings)
    second.semantic("mail")
    assert len(cached) == len(catalogue)
    assert all(embeddings._by_text[text] is vector for text, vector in cached.items())


def test_loading_the_embedding_model_leaves_the_processes_logging_as_it_was() -> None:
    # A fresh interpreter: wordllama's import configures logging only the first time.
    probe = (
        "import logging\n"
        "from router.tools.selection.semantic import embedding_model\n"
        "embedding_model()\n"
        "root = logging.getLogger()\n"
        "print(len(root.handlers), root.level)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["0", str(logging.WARNING)], done.stderr
