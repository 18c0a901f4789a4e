"""A ``${VAR}`` secret is replaced in text as written and in the forms it takes once encoded:
as httpx sends it in a URL, as ``quote`` and ``quote_plus`` write it, inside a JSON string."""

from __future__ import annotations

import json
import string
from urllib.parse import quote, quote_plus

import httpx
from hypothesis import given
from hypothesis import strategies as st

from router.trust.redaction import Redactor

NAME = "${API_KEY}"
# What URLs and JSON encode, and what a query reads as something else (``+``, ``%``).
KEY = 'sk+Live/9xQz== "é\\%41'
REDACT = Redactor({"API_KEY": KEY})


def url_sent(url: str, params: httpx.QueryParams | dict[str, str] | None = None) -> str:
    return str(httpx.Request("GET", url, params=params).url)


def test_a_key_in_a_get_tools_query_is_replaced_as_the_http_handler_sends_it() -> None:
    # The handler reads the configured url's query and sends it again, merged with the args.
    written = httpx.URL("http://host/lookup?key=" + KEY)
    sent = url_sent("http://host/lookup", written.params.merge({"q": "x"}))
    assert sent == "http://host/lookup?key=sk+Live%2F9xQz%3D%3D+%22%C3%A9%5CA&q=x"
    assert REDACT(f"request was GET {sent}") == f"request was GET http://host/lookup?key={NAME}&q=x"


def test_a_key_httpx_writes_into_a_path_a_query_or_a_password_is_replaced() -> None:
    for sent in (
        url_sent("http://host/hook/" + KEY),
        url_sent("http://host/lookup", {"key": KEY}),
        str(httpx.URL("http://host/").copy_with(username="u", password=KEY)),
    ):
        assert "API_KEY" in REDACT(sent) and "9xQz" not in REDACT(sent), (sent, REDACT(sent))


def test_a_key_quoted_or_inside_a_json_string_is_replaced() -> None:
    for encoded in (
        quote(KEY, safe=""),
        quote(KEY),
        quote_plus(KEY),
        json.dumps(KEY)[1:-1],
        json.dumps(KEY, ensure_ascii=False)[1:-1],
    ):
        assert encoded != KEY
        assert REDACT(f"<{encoded}>") == f"<{NAME}>", encoded


def test_text_without_the_key_and_too_short_secrets_are_left_alone() -> None:
    text = 'GET /lookup?key=other&q=sk%2BLive "9xQz"'
    assert REDACT(text) == text
    assert Redactor({"PIN": "a/b"})("a/b a%2Fb") == "a/b a%2Fb"
    assert not Redactor({"PIN": "a/b"})


def test_a_key_not_valid_in_a_url_or_as_utf_8_still_loads_and_is_replaced_as_written() -> None:
    for key in ("line\nbreak#1", "bytes-\udcff-from-the-environment"):
        redact = Redactor({"API_KEY": key})
        assert redact(f"<{key}>") == f"<{NAME}>"
        assert redact(f"<{json.dumps(key)[1:-1]}>") == f"<{NAME}>"


# Lowercase only: no form of such a key is found inside ``${API_KEY}`` itself.
KEYS = st.text(alphabet=string.ascii_lowercase + string.digits + '+/=&?#% "\\é', min_size=4)
ENCODERS = [
    lambda key: key,
    lambda key: quote(key, safe=""),
    quote,
    quote_plus,
    lambda key: json.dumps(key)[1:-1],
    lambda key: str(httpx.QueryParams({"k": key}))[2:],
]


@given(KEYS)
def test_any_key_in_any_of_the_common_encodings_is_replaced_whole(key: str) -> None:
    redact = Redactor({"API_KEY": key})
    for encode in ENCODERS:
        assert redact(f"<{encode(key)}>") == f"<{NAME}>", encode(key)
