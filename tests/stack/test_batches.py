"""Batches over the real API (SPEC §8): bulk submission with mixed calls, counts, NDJSON
results, ownership, idempotent re-submission, bad inputs; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from ..support.audit import audit_rows
from ..support.launcher import REPO
from ..support.stack import Stack

T = TypeVar("T")
DEADLINE_S = 60
NDJSON = {"Content-Type": "application/x-ndjson"}


def eventually(probe: Callable[[], T | None], what: str, timeout: float = DEADLINE_S) -> T:
    """The first truthy answer of ``probe`` within ``timeout``; fails the test otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = probe()
        if answer:
            return answer
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def submit(http: httpx.Client, calls: list[Any], **kw: Any) -> dict[str, Any]:
    response = http.post("/v1/batches", json={"calls": calls}, **kw)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ok"] is True
    return body  # type: ignore[no-any-return]


def status(http: httpx.Client, batch_id: str) -> dict[str, Any]:
    response = http.get(f"/v1/batches/{batch_id}")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def results(http: httpx.Client, batch_id: str) -> list[dict[str, Any]]:
    response = http.get(f"/v1/batches/{batch_id}/results")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines() if line]


def settled(http: httpx.Client, batch_id: str, **expected: int) -> dict[str, Any]:
    """The batch's status once its counts include ``expected``."""

    def probe() -> dict[str, Any] | None:
        body = status(http, batch_id)
        return body if all(body["counts"][k] == v for k, v in expected.items()) else None

    return eventually(probe, f"batch {batch_id} to reach {expected}")


def assert_error(response: httpx.Response, code: int, fragment: str) -> None:
    assert response.status_code == code, response.text
    body = response.json()
    assert set(body) == {"ok", "error"} and body["ok"] is False
    assert fragment in body["error"], body


def test_mixed_batch_rejects_by_index_runs_valid_calls_and_gates_each_gated_call(
    stack: Stack,
) -> None:
    unknown = f"no_such_tool_{uuid.uuid4().hex[:8]}"
    calls = [
        {"tool": "echo", "args": {"i": 0}},
        {"tool": unknown, "args": {}},
        {"tool": "strict", "args": {"to": "x"}},
        {"tool": "high_echo", "args": {"same": True}},
        "not an object",
        {"tool": "echo", "args": {}, "extra": 1},
        {"tool": "value", "args": {"value": 0}},
        {"tool": "high_echo", "args": {"same": True}},
        {"tool": 7},
    ]
    with stack.client() as http:
        receipt = submit(http, calls)
        batch_id = receipt["batch_id"]
        assert batch_id.startswith("batch_")
        assert receipt["total"] == 9
        assert receipt["accepted"] == 4
        rejected = {r["index"]: r["error"] for r in receipt["rejected"]}
        assert rejected == {
            1: f"unknown tool: {unknown}",
            2: rejected[2],
            4: "malformed call: expected a JSON object",
            5: "unknown field: extra",
            8: "tool must be a string",
        }
        assert rejected[2].startswith("invalid arguments: ")
        body = settled(http, batch_id, succeeded=2, pending=2)
        assert body["total"] == 4
        assert body["rejected"] == 5
        assert body["done"] is False
        lines = results(http, batch_id)
    # Rejections are audited like single calls: unknown and invalid.
    assert [r["actor"] for r in audit_rows(stack, tool=unknown, event="unknown")] == ["agent"]
    assert [line["index"] for line in lines] == [0, 3, 6, 7]
    assert lines[0] == {
        "ok": True,
        "call_id": lines[0]["call_id"],
        "tool": "echo",
        "status": "succeeded",
        "value": {"i": 0},
        "index": 0,
    }
    assert lines[2]["value"] == 0 and lines[2]["ok"] is True
    gated = [lines[1], lines[3]]
    assert all(g["status"] == "pending" and g["pending"] is True for g in gated)
    # Two identical gated calls get two requests, each its own pending row.
    assert gated[0]["request_id"] != gated[1]["request_id"]
    for g in gated:
        assert [r["event"] for r in audit_rows(stack, call_id=g["call_id"])] == ["pending"]
    with stack.client("approver") as approver:
        listed = approver.get("/v1/approvals").json()["requests"]
        assert {g["request_id"] for g in gated} <= {r["request_id"] for r in listed}
        for g in gated:
            answer = approver.post(f"/v1/approvals/{g['request_id']}/approve", json={})
            assert answer.json()["status"] == "approved", answer.text
    with stack.client() as http:
        body = settled(http, batch_id, succeeded=4, pending=0)
        assert body["done"] is True


def test_ndjson_body_takes_one_call_per_line_and_rejects_bad_lines_by_index(
    stack: Stack,
) -> None:
    lines = [
        json.dumps({"tool": "echo", "args": {"n": 1}}),
        "",
        "{not json",
        json.dumps({"tool": "echo", "args": {"n": 2}}),
        '{"tool": "echo", "args": {"x": NaN}}',
    ]
    with stack.client() as http:
        response = http.post("/v1/batches", content="\n".join(lines) + "\n", headers=NDJSON)
        assert response.status_code == 200, response.text
        receipt = response.json()
        assert receipt["total"] == 4
        assert [r["index"] for r in receipt["rejected"]] == [1, 3]
        assert all(r["error"].startswith("malformed call") for r in receipt["rejected"])
        settled(http, receipt["batch_id"], succeeded=2)
        values = [line["value"] for line in results(http, receipt["batch_id"])]
    assert values == [{"n": 1}, {"n": 2}]


def test_thousands_of_calls_in_one_batch_all_run_and_stream_back_in_order(
    stack: Stack,
) -> None:
    count = 2500  # more than two chunks
    with stack.client() as http:
        receipt = submit(http, [{"tool": "echo", "args": {"i": i}} for i in range(count)])
        assert receipt["accepted"] == count and receipt["rejected"] == []
        body = settled(http, receipt["batch_id"], succeeded=count)
        assert body["total"] == count and body["done"] is True
        lines = results(http, receipt["batch_id"])
    assert [line["index"] for line in lines] == list(range(count))
    assert [line["value"]["i"] for line in lines] == list(range(count))
    queued = audit_rows(stack, call_id=lines[-1]["call_id"])
    assert [row["event"] for row in queued] == ["queued", "ok"]


def test_batch_belongs_to_its_submitter_and_operators(stack: Stack) -> None:
    with stack.client() as http:
        batch_id = submit(http, [{"tool": "echo", "args": {}}])["batch_id"]
    with stack.client("agent2") as other:
        for path in (f"/v1/batches/{batch_id}", f"/v1/batches/{batch_id}/results"):
            assert_error(other.get(path), 404, f"unknown batch: {batch_id}")
    with stack.client("operator") as operator:
        assert operator.get(f"/v1/batches/{batch_id}").json()["total"] == 1
        assert operator.get(f"/v1/batches/{batch_id}/results").status_code == 200
    with stack.client() as http:
        assert_error(http.get("/v1/batches/batch_" + "0" * 24), 404, "unknown batch")
        assert_error(http.get("/v1/batches/" + "x" * 10_000), 404, "unknown batch")
    with stack.client("approver") as approver:
        assert_error(
            approver.post("/v1/batches", json={"calls": [{"tool": "echo"}]}), 403, "agent role"
        )


def test_resubmitting_a_batch_with_its_keys_replays_instead_of_duplicating(
    stack: Stack,
) -> None:
    batch_key = f"batch-{uuid.uuid4().hex}"
    calls = [
        {"tool": "echo", "args": {"i": i}, "idempotency_key": f"{batch_key}:{i}"} for i in range(5)
    ]
    with stack.client() as http:
        first = submit(http, calls[:3], headers={"Idempotency-Key": batch_key})
        # The re-run after an "interruption" sends everything again, from the start.
        second = submit(http, calls, headers={"Idempotency-Key": batch_key}, params={"offset": 0})
        assert second["batch_id"] == first["batch_id"]
        assert (second["accepted"], second["replayed"], second["rejected"]) == (2, 3, [])
        assert second["replayed_elsewhere"] == []  # each at its own index: in the results
        body = settled(http, first["batch_id"], succeeded=5)
        assert body["total"] == 5
        lines = results(http, first["batch_id"])
        assert [line["index"] for line in lines] == list(range(5))
        # Sent in a batch of its own, a call is the one stored: named, as no result shows it.
        other = submit(http, calls[:1])
        assert other["batch_id"] != first["batch_id"] and other["replayed"] == 1
        assert other["replayed_elsewhere"] == [{"index": 0, "call_id": lines[0]["call_id"]}]
        assert status(http, other["batch_id"])["total"] == 0
        # The same call key with other arguments is a conflict, reported at its index.
        changed = [{"tool": "echo", "args": {"i": 99}, "idempotency_key": f"{batch_key}:0"}]
        third = submit(http, changed)
        assert third["rejected"] == [
            {"index": 0, "error": "idempotency key reused with different arguments"}
        ]
        # One key twice within one batch is one call.
        key = f"{batch_key}:dup"
        twice = submit(http, [{"tool": "echo", "args": {}, "idempotency_key": key}] * 2)
        assert (twice["accepted"], twice["replayed"]) == (1, 1)
        # Its call is in the batch's results, at index 0: not a call from elsewhere.
        assert twice["replayed_elsewhere"] == []


def test_a_keyed_batch_sent_again_holds_each_keyless_call_once(stack: Stack) -> None:
    # A request sent again under the batch's key must not store (and run) its keyless
    # calls again: each is known by its index.
    batch = {"Idempotency-Key": f"batch-{uuid.uuid4().hex}"}
    calls = [{"tool": "echo", "args": {"i": i}} for i in range(3)]
    with stack.client() as http:
        first = submit(http, calls, headers=batch, params={"offset": 0})
        again = submit(http, calls, headers=batch, params={"offset": 0})
        assert (again["accepted"], again["replayed"], again["rejected"]) == (0, 3, [])
        other = submit(
            http,
            [{"tool": "echo", "args": {"i": 99}}, *calls[1:]],
            headers=batch,
            params={"offset": 0},
        )
        assert (other["accepted"], other["replayed"]) == (0, 2)
        assert other["rejected"] == [
            {"index": 0, "error": "the batch holds another call at index 0"}
        ]
        # Further calls at further indexes are new calls of the same batch.
        more = submit(http, calls[:1], headers=batch, params={"offset": 3})
        assert more["batch_id"] == first["batch_id"] and more["accepted"] == 1
        settled(http, first["batch_id"], succeeded=4)
        lines = results(http, first["batch_id"])
    assert [line["index"] for line in lines] == [0, 1, 2, 3]


def test_a_keyed_batch_sent_again_counts_each_refused_index_once(stack: Stack) -> None:
    """A file of bad lines run again (the CLI sends its lines under the file's key) must
    not read as more rejections each time; a new refused index still counts."""
    batch = {"Idempotency-Key": f"batch-{uuid.uuid4().hex}"}
    calls = [{"tool": "echo", "args": {}}, {"tool": "no_such_tool"}, "not a call"]
    other = [{"tool": "echo", "args": {"i": 1}}]
    with stack.client() as http:
        first = submit(http, calls, headers=batch, params={"offset": 0})
        for _ in range(2):
            again = submit(http, calls, headers=batch, params={"offset": 0})
            assert [r["index"] for r in again["rejected"]] == [1, 2], again
        # Another call at a taken index is refused there, each time it is sent.
        clash = [submit(http, other, headers=batch, params={"offset": 0}) for _ in range(2)]
        assert all(c["rejected"][0]["index"] == 0 for c in clash), clash
        counts = settled(http, first["batch_id"], succeeded=1)
    assert (counts["submitted"], counts["rejected"]) == (11, 3), counts


def test_a_request_without_an_offset_goes_after_every_call_placed_so_far(
    stack: Stack,
) -> None:
    batch = {"Idempotency-Key": f"batch-{uuid.uuid4().hex}"}
    calls = [{"tool": "echo", "args": {"i": i}} for i in range(3)]
    with stack.client() as http:
        first = submit(http, calls, headers=batch, params={"offset": 3})
        # After index 5, not at the count of calls received (3), which holds a call.
        after = submit(http, calls[:2], headers=batch)
        assert (after["accepted"], after["rejected"]) == (2, []), after
        before = submit(http, calls[:1], headers=batch, params={"offset": 0})
        last = submit(http, calls[:1], headers=batch)
        assert (before["accepted"], last["accepted"]) == (1, 1)
        counts = settled(http, first["batch_id"], succeeded=7)
        lines = results(http, first["batch_id"])
    assert [line["index"] for line in lines] == [0, 3, 4, 5, 6, 7, 8]
    assert (counts["submitted"], counts["rejected"]) == (7, 0)


def test_an_over_large_call_is_rejected_alone(stack: Stack) -> None:
    big = {"blob": "x" * (300 * 1024)}
    with stack.client() as http:
        receipt = submit(http, [{"tool": "echo", "args": big}, {"tool": "echo", "args": {}}])
    assert [r["index"] for r in receipt["rejected"]] == [0]
    assert receipt["rejected"][0]["error"].startswith("arguments too large")
    assert receipt["accepted"] == 1


def test_an_items_key_is_refused_with_the_same_words_whatever_is_wrong_with_it(
    stack: Stack,
) -> None:
    bad = ["", "k" * 257, 7, "a\x00b"]
    items = [{"tool": "echo", "args": {}, "idempotency_key": key} for key in bad]
    with stack.client() as http:
        receipt = submit(http, items)
    message = "idempotency_key must be a string of 1-256 printable characters"
    assert receipt["rejected"] == [{"index": i, "error": message} for i in range(len(bad))]
    assert receipt["accepted"] == 0


def test_an_item_the_rules_cannot_read_is_gated_and_the_rest_run(stack: Stack) -> None:
    # An integer beyond CEL's signed 64 bits is one item's matter: the batch around it is
    # stored whole, and no batch row counts calls it never stored.
    calls = [
        {"tool": "echo", "args": {"ok": 1}},
        {"tool": "rule_wire", "args": {"amount": 2**63, "to": "bob"}},
    ]
    with stack.client() as http:
        receipt = submit(http, calls)
        assert (receipt["accepted"], receipt["rejected"]) == (2, []), receipt
        counts = settled(http, receipt["batch_id"], pending=1, succeeded=1)
    assert (counts["total"], counts["submitted"]) == (2, 2)


@pytest.mark.parametrize(
    ("content", "code", "fragment"),
    [
        (b"{not json", 422, "malformed body"),
        (b"", 422, "malformed body"),
        (b"[]", 422, "expected a JSON object"),
        (b'{"calls": {}}', 422, "calls must be a list"),
        (b'{"calls": []}', 422, "at least one call"),
        (b'{"cals": []}', 422, "unknown field: cals"),
        (b"{}", 422, "missing field: calls"),
        (b'{"calls": [], "idempotency_key": ""}', 422, "idempotency_key"),
        (b'{"calls": [' + b"[" * 10_000 + b"]" * 10_000 + b"]}", 422, "nested too deeply"),
        (b'{"calls": [{"tool": "echo"}]}\xff', 422, "UTF-8"),
    ],
)
def test_malformed_batch_bodies_are_422(
    stack: Stack, content: bytes, code: int, fragment: str
) -> None:
    with stack.client() as http:
        response = http.post(
            "/v1/batches", content=content, headers={"Content-Type": "application/json"}
        )
    assert_error(response, code, fragment)


def test_too_many_calls_or_too_large_a_body_is_413(stack: Stack) -> None:
    limit = stack.settings.max_batch_calls
    too_many = b'{"calls": [' + b",".join([b"{}"] * (limit + 1)) + b"]}"
    with stack.client() as http:
        assert_error(
            http.post(
                "/v1/batches", content=too_many, headers={"Content-Type": "application/json"}
            ),
            413,
            f"too many calls: over the limit of {limit}",
        )
        # NDJSON: counted before any line is parsed; blank lines are no calls.
        lines = b"\n\n".join([b"{}"] * (limit + 1))
        assert_error(
            http.post("/v1/batches", content=lines, headers=NDJSON),
            413,
            f"too many calls: {limit + 1}, over the limit of {limit}",
        )
        exactly = http.post(
            "/v1/batches", content=b"\n\n".join([b"{}"] * limit) + b"\n\n", headers=NDJSON
        )
        assert exactly.status_code == 200, exactly.text[:300]
        assert exactly.json()["total"] == limit
        big = b"\n" * (stack.settings.max_batch_bytes + 1)
        assert_error(http.post("/v1/batches", content=big, headers=NDJSON), 413, "over the limit")


def peak_rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) // 1024


def test_a_json_body_of_millions_of_tiny_entries_is_refused_without_building_them(
    stack: Stack,
) -> None:
    # 24 MiB of `[]`: json.loads made 8 million lists of it (the API grew by gigabytes at
    # the byte limit) in one call that held every other request of the process.
    entries = 8_000_000
    body = b'{"calls": [' + b",".join([b"[]"] * entries) + b"]}"
    api = stack.processes["api"].pid
    before = peak_rss_mib(api)
    slowest, done = [0.0], threading.Event()

    def ping() -> None:
        with httpx.Client(base_url=stack.base_url, timeout=30) as other:
            while not done.is_set():
                started = time.monotonic()
                assert other.get("/healthz").status_code == 200
                slowest[0] = max(slowest[0], time.monotonic() - started)
                time.sleep(0.02)

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        with stack.client() as http:
            response = http.post(
                "/v1/batches", content=body, headers={"Content-Type": "application/json"}
            )
    finally:
        done.set()
        pinger.join()
    grown = peak_rss_mib(api) - before
    print(f"API peak RSS grew {grown} MiB; slowest /healthz meanwhile {slowest[0]:.2f} s")
    assert grown < 250, grown
    assert slowest[0] < 1.0, slowest
    limit = stack.settings.max_batch_calls
    assert_error(response, 413, f"too many calls: over the limit of {limit}")


@pytest.mark.parametrize("offset", ["-1", "x", "1e3", str(2**60), "\u00b3", "\u0661"])
def test_bad_offset_is_422(stack: Stack, offset: str) -> None:
    with stack.client() as http:
        response = http.post(
            "/v1/batches", json={"calls": [{"tool": "echo"}]}, params={"offset": offset}
        )
    assert_error(response, 422, "offset")


def test_batch_endpoints_need_a_key(stack: Stack) -> None:
    with stack.client(key="") as http:
        assert http.post("/v1/batches", json={"calls": [{"tool": "echo"}]}).status_code == 401
        assert http.get("/v1/batches/batch_" + "0" * 24).status_code == 401


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    port = stack.base_url.rsplit(":", 1)[1]
    env = {**stack.env, "TOOLROUTER_API_PORT": port, "TOOLROUTER_KEY": stack.keys["agent"]}
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", *args],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_submits_a_file_waits_and_a_rerun_adds_nothing(stack: Stack, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    lines = [json.dumps({"tool": "echo", "args": {"i": i, "m": marker}}) for i in range(5)]
    lines.insert(2, "")
    lines.insert(4, "{broken")
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = cli(stack, "batch", "submit", str(path), "--wait")
    # One line is not JSON: reported with its line number, and the exit code says so.
    assert first.returncode == 1, first.stderr
    assert "line 5:" in first.stderr and "5 new" in first.stderr
    assert "5 succeeded" in first.stderr
    batch_id = first.stdout.strip().splitlines()[-1]
    assert batch_id.startswith("batch_")
    again = cli(stack, "batch", "submit", str(path))
    assert again.stdout.strip().splitlines()[-1] == batch_id
    assert "0 new, 5 already stored" in again.stderr
    shown = cli(stack, "batch", "results", batch_id)
    assert shown.returncode == 0, shown.stderr
    values = [json.loads(line)["value"]["i"] for line in shown.stdout.splitlines()]
    assert values == list(range(5))
    counts = json.loads(cli(stack, "batch", "status", batch_id).stdout)
    assert (counts["total"], counts["counts"]["succeeded"], counts["done"]) == (5, 5, True)
    missing = cli(stack, "batch", "results", "batch_" + "0" * 24)
    assert missing.returncode == 2 and "unknown batch" in missing.stderr


def test_cli_names_lines_stored_before_outside_the_batch(stack: Stack, tmp_path: Path) -> None:
    """A changed file is another batch: its line with a key used before is that call, which
    `batch results` of the new batch will not show, so the command names it."""
    keyed = json.dumps({"tool": "echo", "args": {}, "idempotency_key": uuid.uuid4().hex})
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text(keyed + "\n", encoding="utf-8")
    second.write_text(json.dumps({"tool": "echo", "args": {"n": 2}}) + "\n" + keyed + "\n")
    done = cli(stack, "batch", "submit", str(first))
    (line,) = cli(stack, "batch", "results", done.stdout.strip().splitlines()[-1]).stdout.split()
    again = cli(stack, "batch", "submit", str(second))
    assert again.returncode == 0, again.stderr
    shown = again.stderr.splitlines()
    assert "  1 already stored outside this batch's results (by their keys):" in shown, shown
    assert f"  line 2: {json.loads(line)['call_id']}" in shown, shown


def test_cli_reads_a_file_that_starts_with_a_byte_order_mark(stack: Stack, tmp_path: Path) -> None:
    line = json.dumps({"tool": "echo", "args": {"m": uuid.uuid4().hex}})
    path = tmp_path / "from-windows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line.encode() + b"\r\n")
    done = cli(stack, "batch", "submit", str(path))
    assert done.returncode == 0, done.stderr
    assert "1 calls, 1 new, 0 already stored, 0 rejected" in done.stderr, done.stderr


def test_cli_shows_tool_names_as_written_and_the_summary_on_one_line(
    stack: Stack, tmp_path: Path
) -> None:
    # The server's errors quote the file's tool names, which may read as terminal markup.
    lines = [
        json.dumps({"tool": "[bold]x", "args": {}}),
        json.dumps({"tool": "[/x]", "args": {}}),
        json.dumps({"tool": "echo", "args": {"m": uuid.uuid4().hex}}),
    ]
    path = tmp_path / "markup.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = cli(stack, "batch", "submit", str(path), "--wait")
    assert done.returncode == 1, done.stderr
    batch_id = done.stdout.strip().splitlines()[-1]
    assert batch_id.startswith("batch_"), done.stdout + done.stderr
    shown = done.stderr.splitlines()
    # Longer than 80 columns, and still one line when stderr is not a terminal.
    assert f"batch {batch_id}: 3 calls, 1 new, 0 already stored, 2 rejected" in shown, shown
    assert "  line 1: unknown tool: [bold]x" in shown, shown
    assert "  line 2: unknown tool: [/x]" in shown, shown
    assert f"batch {batch_id}: 1 succeeded" in shown, shown
