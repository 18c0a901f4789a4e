"""Prometheus metrics across processes, and per-tool statistics from the database."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from router.metrics import NotifyOutcome, Tampered, Untrusted
from router.runtime import Runtime
from router.tools.notify_config import ChannelType

from ..support.launcher import REPO
from ..support.stack import Stack


def sample(text: str, name: str, labels: str = "") -> float | None:
    pattern = re.escape(name) + (r"\{" + labels + r"\}" if labels else "") + r" ([0-9.e+]+)"
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


def test_metrics_count_calls_by_outcome_across_processes(stack: Stack) -> None:
    with stack.client("agent") as http:
        assert http.post("/v1/calls", json={"tool": "echo", "args": {}, "wait_s": 20}).json()["ok"]
        http.post("/v1/calls", json={"tool": "value_error", "args": {}, "wait_s": 20})
        pending = http.post("/v1/calls", json={"tool": "high_echo", "args": {}}).json()
    with stack.client("approver") as http:
        http.post(f"/v1/approvals/{pending['request_id']}/approve", json={"wait_s": 20})
    with stack.client("") as http:  # /metrics needs no key
        response = http.get("/metrics")
    assert response.status_code == 200
    text = response.text
    # Counted by the worker processes, served by the API process.
    assert (sample(text, "toolrouter_calls_total", 'outcome="succeeded",tool="echo"') or 0) >= 1
    assert (sample(text, "toolrouter_calls_total", 'outcome="failed",tool="value_error"') or 0) >= 1
    assert "toolrouter_call_duration_seconds_bucket" in text
    assert sample(text, "toolrouter_queue_depth", 'queue="tools.low"') is not None
    assert sample(text, "toolrouter_pending_requests") is not None
    # Counted by the approval worker.
    assert (
        sample(
            text, "toolrouter_approval_wait_seconds_count", 'decision="approved",tool="high_echo"'
        )
        or 0
    ) >= 1


def test_a_cached_answer_counts_as_a_call_but_not_as_a_run(stack: Stack, tmp_path: Path) -> None:
    """The duration histogram is the handler's run time: a cached answer ran nothing."""
    succeeded = 'outcome="succeeded",tool="cached_ledger"'
    ran = 'tool="cached_ledger"'
    with stack.client("") as http:
        before = http.get("/metrics").text
    args = {"path": str(tmp_path / "runs")}
    with stack.client("agent") as http:
        for _ in range(2):
            answer = http.post(
                "/v1/calls", json={"tool": "cached_ledger", "args": args, "wait_s": 20}
            ).json()
            assert answer["status"] == "succeeded", answer
    with stack.client("") as http:
        after = http.get("/metrics").text
    calls = [sample(text, "toolrouter_calls_total", succeeded) or 0 for text in (before, after)]
    runs = [
        sample(text, "toolrouter_call_duration_seconds_count", ran) or 0 for text in (before, after)
    ]
    assert (calls[1] - calls[0], runs[1] - runs[0]) == (2, 1)
    assert len((tmp_path / "runs").read_text(encoding="utf-8").splitlines()) == 1


def test_the_counters_to_alert_on_are_shown_before_anything_counts(stack: Stack) -> None:
    # A series that first appears at 1 shows no increase, and a panel of none no data.
    with stack.client("") as http:
        text = http.get("/metrics").text
    for message in Untrusted:
        assert sample(text, "toolrouter_untrusted_messages_total", f'kind="{message}"') is not None
    for row in Tampered:
        assert sample(text, "toolrouter_tampered_records_total", f'kind="{row}"') is not None
    attempts = [(channel, outcome) for channel in ChannelType for outcome in NotifyOutcome]
    for channel, outcome in [*attempts, ("any", NotifyOutcome.NOT_QUEUED)]:
        labels = f'channel_type="{channel}",outcome="{outcome}"'
        shown = sample(text, "toolrouter_notifications_total", labels) is not None
        # A channel's attempt is delivered, retried, failed or skipped; only the hand-over to the
        # queue, before any channel, is not_queued.
        assert shown is ((channel == "any") == (outcome == NotifyOutcome.NOT_QUEUED)), labels


def test_tool_stats_show_calls_success_latency_and_errors(stack: Stack) -> None:
    with stack.client("agent") as http:
        for _ in range(3):
            http.post("/v1/calls", json={"tool": "value_error", "args": {}, "wait_s": 20})
        stats = http.get("/v1/tools/value_error").json()["stats"]
    assert stats["calls"] >= 3
    assert stats["success_rate"] == 0
    assert stats["errors_by_type"]["ValueError"] >= 3
    assert stats["latency_p50_s"] is not None and stats["latency_p95_s"] is not None


def toolrouter_stats(stack: Stack, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", "stats", *flags],
        env=stack.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_toolrouter_stats_prints_the_table(stack: Stack) -> None:
    result = toolrouter_stats(stack, "--json")
    assert result.returncode == 0, result.stderr
    assert '"tool": "echo"' in result.stdout and "cost_by_key" in result.stdout


def test_toolrouter_stats_shows_a_key_name_that_reads_as_markup_as_written(stack: Stack) -> None:
    name = f"[/a] [bold]{uuid.uuid4().hex[:8]}"
    runtime = Runtime(stack.settings)
    try:
        token = runtime.keys.create(name, ["agent"])
    finally:
        runtime.close()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=stack.base_url, headers=headers, timeout=60) as http:
        done = http.post("/v1/calls", json={"tool": "echo", "args": {}, "wait_s": 20}).json()
    assert done["status"] == "succeeded", done
    result = toolrouter_stats(stack)
    assert result.returncode == 0, result.stderr
    # Every key on one line however many there are, this one by its own name.
    spent = result.stdout.splitlines()[-1]
    assert spent.startswith("cost by key: "), result.stdout
    assert f"{name} 0" in spent.removeprefix("cost by key: ").split(", "), spent
