"""A batch body's values are built a call at a time, never all at once (a hostile agent).

JSON makes tiny values cheap to send and dear to hold: ``[]`` is three bytes on the wire and
some 70 bytes as a Python list. A body of tens of MiB of them, parsed whole, grows the API
by gigabytes; these bodies are within every limit but the one on a call's size.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from ..support.stack import Stack

# Peak growth allowed to the API while it reads one of these bodies: a few times the body's
# own size, where building it whole costs some twenty-five times.
GROWTH_MIB = 250


def rss_mib(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0]) // 1024


def reset_peak(pid: int) -> int:
    """The process's resident MiB now, its peak set back to it (earlier tests' peaks gone)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return rss_mib(pid, "VmRSS")


def tiny_values(count: int) -> bytes:
    return b"[" + b",".join([b"[]"] * count) + b"]"


def posted(stack: Stack, body: bytes, content_type: str) -> tuple[httpx.Response, int]:
    """The API's answer to ``body`` and how far its peak resident memory grew, in MiB."""
    api = stack.processes["api"].pid
    before = reset_peak(api)
    with stack.client() as http:
        response = http.post("/v1/batches", content=body, headers={"Content-Type": content_type})
    grown = rss_mib(api, "VmHWM") - before
    print(f"API peak RSS grew {grown} MiB for a {len(body) >> 20} MiB body")
    return response, grown


def test_one_call_written_in_millions_of_tiny_values_is_refused_unbuilt(stack: Stack) -> None:
    # One call of 24 MiB, in a body with room for many calls: too large to be a call, so it
    # is never built, and no call after it is read.
    body = b'{"calls": [{"tool": "echo", "args": {"x": ' + tiny_values(8_000_000) + b"}}]}"
    refused_unbuilt(stack, body)


def test_calls_of_tiny_values_each_within_the_limits_are_read_a_chunk_at_a_time(
    stack: Stack,
) -> None:
    # 120 lines of 200 KiB each: every call within the size limit, the body within its own.
    # The tool is unknown, so each call is read, refused and audited: nothing runs.
    line = b'{"tool": "no_such_tool", "args": {"x": ' + tiny_values(68_000) + b"}}"
    response, grown = posted(stack, b"\n".join([line] * 120), "application/x-ndjson")
    assert response.status_code == 200, response.text
    receipt = response.json()
    assert (receipt["total"], receipt["accepted"]) == (120, 0), receipt
    assert {r["error"] for r in receipt["rejected"]} == {"unknown tool: no_such_tool"}
    assert grown < GROWTH_MIB, grown


def test_a_body_of_few_commas_but_deep_nesting_is_read_a_call_at_a_time(stack: Stack) -> None:
    # 20,000 commas, each before a value nested 300 deep: fewer commas than calls allowed,
    # yet six million lists, which json.loads built whole (+600 MiB for a 12 MiB body).
    chain = b"[" * 300 + b"]" * 300
    args = b"[" + b",".join([chain] * 20_000) + b"]"
    body = b'{"calls": [{"tool": "echo", "args": {"x": ' + args + b"}}]}"
    refused_unbuilt(stack, body)


def test_one_character_beyond_ascii_does_not_widen_the_body_held(stack: Stack) -> None:
    # Decoded whole, one emoji would make the text four bytes a character, four times the
    # body; read as its bytes, it costs what an ASCII body costs.
    emoji = "\U0001f600".encode()
    args = b'{"note": "' + emoji + b'", "x": ' + tiny_values(20_000_000) + b"}"
    body = b'{"calls": [{"tool": "echo", "args": ' + args + b"}]}"
    refused_unbuilt(stack, body)


def refused_unbuilt(stack: Stack, body: bytes) -> None:
    """Its first call is too long to be a call: a 413, the API grown by little."""
    response, grown = posted(stack, body, "application/json")
    assert response.status_code == 413, response.text
    too_long = f"call 0 is written in more than {stack.settings.call_body_bytes} bytes"
    assert response.json() == {"ok": False, "error": too_long}
    assert grown < GROWTH_MIB, grown
