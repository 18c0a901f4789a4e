"""Properties over generated input (SPEC §4, §7, §8, §14), with hypothesis and schemathesis.

- Any JSON body to ``POST /v1/calls`` gets a JSON answer with ``ok``, never a 500.
- The audit chain verifies after any sequence of submits, approvals, denials, cancels,
  runs and expiries, and each call's last audit event says how it ended.
- schemathesis, from the live API's ``/openapi.json``, drives every endpoint with valid
  keys: no 500, no answer that breaks its documented schema.

Example counts are kept small (and the example database off) so the file stays well under a
minute per backend; the shrinker still names the smallest failing input.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error, response_schema_conformance

from approvals.gate import Gate
from router.audit import log as audit
from router.auth.principal import Principal
from router.clock import FakeClock
from router.errors import NotCancellable, NotFound
from router.runtime import Runtime
from router.status import CallStatus
from workers.execution import Executor

from ..support.stack import Stack


@pytest.fixture(scope="module")
def tally(request: pytest.FixtureRequest) -> Iterator[Counter[str]]:
    """Answers by suite and status code, printed once the module has run."""
    counts: Counter[str] = Counter()
    yield counts
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    operations = sum(1 for key in counts if key.startswith("operation "))
    summary = " ".join(f"{k}={n}" for k, n in sorted(counts.items()) if " " not in k)
    if operations:
        summary += f" schemathesis_method_paths={operations}"
    if reporter is not None and counts:
        reporter.write_line(f"\n[properties] {summary}")


# -- any JSON body ------------------------------------------------------------------------

# Tools that finish at once whatever their arguments: no sleeper, nothing that kills its
# worker, nothing gated (the shared stack's approvers should not inherit requests).
QUICK_TOOLS = ["echo", "value", "strict", "value_error", "key_error", "nan", "not_json"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
call_bodies = st.fixed_dictionaries(
    {},
    optional={
        "tool": st.sampled_from([*QUICK_TOOLS, "no-such-tool", "", "__proto__"]) | json_values,
        "args": st.dictionaries(st.text(max_size=10), json_values, max_size=4) | json_values,
        "idempotency_key": st.text(max_size=20) | json_values,
        "wait_s": st.floats(min_value=0, max_value=2) | json_values,
    },
)
well_formed = st.fixed_dictionaries(
    {
        "tool": st.sampled_from([*QUICK_TOOLS, "no-such-tool"]),
        "args": st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    },
    optional={
        "idempotency_key": st.text(
            st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=8
        ),
        "wait_s": st.floats(min_value=0, max_value=2),
    },
)
any_body = st.one_of(
    well_formed, call_bodies, json_values, st.dictionaries(st.text(max_size=10), json_values)
)

FEW = settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def agent_http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client("agent") as http:
        yield http


@FEW
@given(body=any_body)
def test_any_json_body_gets_a_json_answer_with_ok_and_never_a_500(
    agent_http: httpx.Client, tally: Counter[str], body: Any
) -> None:
    response = agent_http.post(
        "/v1/calls", content=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    tally[f"any_body_{response.status_code}"] += 1

    assert response.status_code in {200, 409, 413, 422}, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    assert isinstance(answer, dict) and isinstance(answer.get("ok"), bool), answer
    if response.status_code != 200:
        assert answer["ok"] is False and isinstance(answer["error"], str), answer
        return
    # ``ok`` exactly when there is a value (SPEC §4).
    assert answer["ok"] is (answer["status"] == CallStatus.SUCCEEDED), answer
    assert ("value" in answer) is answer["ok"], answer
    if answer["status"] == "rejected":
        assert "call_id" not in answer and answer["error"], answer


# -- the audit chain after any sequence of operations -------------------------------------

AGENTS = ("agent", "agent2")
APPROVER_KEYS = {
    "approver": frozenset({"approver"}),
    "approver2": frozenset({"approver"}),
    "agent": frozenset({"agent"}),  # no approver role: refused, and never audited
}
SUBMITS = [
    ("echo", {"n": 1}),
    ("high_echo", {"n": 1}),
    ("two_man", {"n": 1}),
    ("strict", {"to": "x", "amount": -1}),  # invalid: audited ``invalid``
    ("no-such-tool", {}),  # audited ``unknown``
]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from(SUBMITS), st.sampled_from(AGENTS)),
        st.tuples(st.just("approve"), st.integers(0, 7), st.sampled_from(sorted(APPROVER_KEYS))),
        st.tuples(st.just("deny"), st.integers(0, 7), st.sampled_from(sorted(APPROVER_KEYS))),
        st.tuples(st.just("cancel"), st.integers(0, 7), st.sampled_from(AGENTS)),
        st.tuples(st.just("run"), st.integers(0, 7), st.just("")),
        st.tuples(st.just("expire"), st.integers(1, 3_600_000), st.just("")),
    ),
    max_size=14,
)
# The last audit event a call may have in each status.
LAST_EVENTS = {
    CallStatus.QUEUED: {"queued", "approved"},
    CallStatus.PENDING: {"pending", "approved"},
    CallStatus.SUCCEEDED: {"ok"},
    CallStatus.FAILED: {"error"},
    CallStatus.DENIED: {"denied"},
    CallStatus.EXPIRED: {"expired"},
    CallStatus.CANCELLED: {"cancelled"},
}


class Operator:
    """Applies operations in-process, through the same components the processes use."""

    def __init__(self, runtime: Runtime, clock: FakeClock) -> None:
        self.runtime, self.clock = runtime, clock
        self.notifier = runtime.notifier()
        self.gate = Gate(runtime, self.notifier)
        self.executor = Executor(runtime, self.notifier, actor="worker@properties")
        self.calls: list[tuple[str, str | None]] = []  # call id, request id
        # The gate reads who decides from the database: every key here exists there.
        known = {key["name"] for key in runtime.keys.list()}
        for name, roles in {**APPROVER_KEYS, "agent2": frozenset({"agent"})}.items():
            if name not in known:
                runtime.keys.create(name, sorted(roles))

    def close(self) -> None:
        self.notifier.client.close()

    def apply(self, op: str, what: Any, who: str) -> None:
        if op == "submit":
            tool, args = what
            result = self.runtime.dispatcher.submit(who, tool, args)
            if result.call_id is not None:
                self.calls.append((result.call_id, result.request_id))
            return
        if op == "expire":
            self.clock.advance(what)
            self.gate.expire_due()
            return
        if not self.calls:
            return
        call_id, request_id = self.calls[what % len(self.calls)]
        if op in ("approve", "deny") and request_id is not None:
            self.gate.decide(request_id, who, op)
        elif op == "cancel":
            self.cancel(call_id, request_id, Principal(who, frozenset({"agent"})))
        elif op == "run":
            # As its message names it: a message naming another tool is put back unrun.
            self.executor.run(call_id, self.runtime.calls.read(call_id).tool)

    def cancel(self, call_id: str, request_id: str | None, who: Principal) -> None:
        row = self.runtime.calls.read(call_id)
        if row.status == CallStatus.PENDING and request_id is not None:
            # What the approval worker does with the cancel message the API sends.
            self.gate.decide(request_id, who.name, "cancel")
            return
        try:
            self.runtime.calls.cancel(who, call_id)
        except (NotFound, NotCancellable):
            pass


@FEW
@given(ops=operations)
def test_audit_chain_verifies_after_any_sequence_of_operations(
    runtime: Runtime, clock: FakeClock, ops: list[tuple[str, Any, str]]
) -> None:
    operator = Operator(runtime, clock)
    try:
        for op, what, who in ops:
            operator.apply(op, what, who)
    finally:
        operator.close()

    report = runtime.verify_audit()
    checked, bad_seq, reason = (
        report.checked,
        report.problems[0].seq if report.problems else None,
        str(report.problems[0]) if report.problems else None,
    )
    with runtime.store.reading() as conn:
        for call_id, _ in operator.calls:
            row = runtime.store.get(conn, call_id)
            assert row is not None
            events = [r["event"] for r in audit.query(conn, call_id=call_id, limit=1000)]
            assert events and events[-1] in LAST_EVENTS[CallStatus(row.status)], (
                row.status,
                events,
            )
    assert (bad_seq, reason) == (None, None)
    assert checked >= len(operator.calls)


# -- schemathesis against the live API -------------------------------------------------------

# The key each kind of operation is made with: submissions by an agent, decisions by an
# approver, everything else read by an operator.
AGENT_OPERATIONS = {
    ("POST", "/v1/calls"),
    ("POST", "/v1/batches"),
    ("POST", "/v1/route"),
    ("DELETE", "/v1/calls/{call_id}"),
}
APPROVER_OPERATIONS = {
    ("POST", "/v1/approvals/{request_id}/approve"),
    ("POST", "/v1/approvals/{request_id}/deny"),
}


@pytest.fixture
def api_schema(stack: Stack) -> Any:
    return schemathesis.openapi.from_url(f"{stack.base_url}/openapi.json")


@pytest.fixture
def http_session() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_endpoint_answers_within_its_schema_and_never_500(
    case: Any, stack: Stack, http_session: requests.Session, tally: Counter[str]
) -> None:
    operation = (case.method.upper(), case.path)
    key = (
        "agent"
        if operation in AGENT_OPERATIONS
        else "approver"
        if operation in APPROVER_OPERATIONS
        else "operator"
    )
    tally[f"operation {operation[0]} {operation[1]}"] = 1
    response = case.call_and_validate(
        session=http_session,
        headers={"Authorization": f"Bearer {stack.keys[key]}"},
        checks=[not_a_server_error, response_schema_conformance],
        timeout=60,
    )
    tally[f"schemathesis_{response.status_code}"] += 1
