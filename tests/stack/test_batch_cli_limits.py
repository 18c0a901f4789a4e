"""`toolrouter batch submit` keeps within the server's limits: a file larger than one
request may be is sent in several, and a line no request could carry is rejected alone,
here, the rest stored. A real API with small limits, the real command."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.stack import Stack, own_stack
from .test_batches import cli

REDIS_DB = 10
MAX_ARGS_BYTES = 1024
# Under a call's own limit: a line of a size between them fits no request either.
MAX_BATCH_BYTES = 16 * 1024


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    with own_stack(
        tmp_path_factory.mktemp("batch-cli-limits"),
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"]},
        TOOLROUTER_MAX_ARGS_BYTES=str(MAX_ARGS_BYTES),
        TOOLROUTER_MAX_BATCH_BYTES=str(MAX_BATCH_BYTES),
    ) as stack:
        stack.start_api()
        yield stack


def test_a_file_over_one_requests_limit_is_sent_whole_but_a_line_too_long(
    stack: Stack, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    call = {"tool": "echo", "args": {"s": "x" * (30 * MAX_ARGS_BYTES)}}
    # Each line under the arguments' limit; together well over one request's.
    lines = [json.dumps({"tool": "echo", "args": {"i": i, "s": marker * 27}}) for i in range(120)]
    assert sum(len(line) + 1 for line in lines) > 1.5 * MAX_BATCH_BYTES
    path = tmp_path / "large.jsonl"
    # Sent as written (it has its own key): a call's limit would take it, a request's not.
    padded = json.dumps({"tool": "echo", "args": {}, "idempotency_key": marker})
    padded = padded[:-1] + " " * 17_000 + "}"
    assert MAX_BATCH_BYTES < len(padded) < stack.settings.call_body_bytes
    body = [lines[0], json.dumps(call), padded, *lines[1:]]
    path.write_text("\n".join(body) + "\n", "utf-8")
    # As sent, with the key the command gives a line without one.
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sent = json.dumps({**call, "idempotency_key": f"{digest[:32]}:2"}, separators=(",", ":"))

    done = cli(stack, "batch", "submit", str(path))
    assert done.returncode == 1, done.stderr
    batch_id = done.stdout.strip().splitlines()[-1]
    assert f"batch {batch_id}: 122 calls, 120 new, 0 already stored, 2 rejected" in done.stderr
    limit = MAX_BATCH_BYTES - 1  # a line sent alone is a body with its newline
    assert f"  line 2: call is {len(sent)} bytes, over the limit of {limit}" in done.stderr
    assert f"  line 3: call is {len(padded)} bytes, over the limit of {limit}" in done.stderr
    again = cli(stack, "batch", "submit", str(path))
    assert "122 calls, 0 new, 120 already stored, 2 rejected" in again.stderr, again.stderr
    counts = json.loads(cli(stack, "batch", "status", batch_id).stdout)
    assert (counts["total"], counts["submitted"], counts["rejected"]) == (120, 244, 2), counts
