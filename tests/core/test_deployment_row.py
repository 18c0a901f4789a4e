"""The deployment row says where the keyed audit chain begins; rows before it are chained
without the key. Someone who can write the database but does not hold the key must not be
able to move that boundary: a row re-created at today's head would let them re-chain the
whole log with plain SHA-256 and pass ``verify``.

The rewrite below needs no trigger dropped: an unsigned checkpoint over a forged segment,
the hot rows deleted under it, the deployment row deleted.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from router.audit.deployment import FORGED, MISSING, record_file
from router.audit.log import GENESIS_HASH, hashed_text
from router.clock import FakeClock
from router.db.schema import audit_log, deployment
from router.errors import ConfigError
from router.runtime import Runtime

from ..support.audit import verify_on_the_cli
from .test_audit_log import append, archive_old, export_head, problems, rows

NO_CALL = {"call_id": None, "request_id": None, "detail": None}
MISSING_ROW = (None, "the deployment row is missing: where the keyed chain begins is unknown")


def chained_plainly(rows: list[dict[str, object]]) -> str:
    """Number ``rows`` from 1 and chain them with plain SHA-256, as rows written before the
    deployment had a key are; the last hash."""
    prev = GENESIS_HASH
    for seq, row in enumerate(rows, start=1):
        row.update(seq=seq, prev_hash=prev)
        row["hash"] = prev = hashlib.sha256(hashed_text(row).encode()).hexdigest()
    return prev


def rewrite_without_the_key(runtime: Runtime) -> None:
    """Replace the whole log with a history chained with plain SHA-256 (as rows from before
    the key are), archived under an unsigned checkpoint, and delete the deployment row."""
    forged = [dict(row, actor="mallory") for row in reversed(rows(runtime))]
    # One row past the real head, so the forged checkpoint covers every real row.
    forged.append(dict(forged[-1]))
    prev = chained_plainly(forged)
    through = len(forged)
    segment = f"audit-{1:012d}-{through:012d}.jsonl.gz"
    runtime.archive_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(runtime.archive_dir / segment, "wt", encoding="utf-8") as out:
        out.writelines(json.dumps(row, sort_keys=True) + "\n" for row in forged)
    digest = hashlib.sha256((runtime.archive_dir / segment).read_bytes()).hexdigest()
    line = {
        "segment": segment,
        "from_seq": 1,
        "through_seq": through,
        "rows": through,
        "first_prev_hash": GENESIS_HASH,
        "last_hash": prev,
        "sha256": digest,
        "archived_at": 0,
    }
    (runtime.archive_dir / "manifest.jsonl").write_text(json.dumps(line) + "\n")
    with runtime.engine.begin() as conn:
        # The checkpoint's trigger wants a row with its hash: a placeholder, deleted below.
        conn.execute(
            text(
                "INSERT INTO audit_log (seq, at, event, actor, prev_hash, hash)"
                " VALUES (:seq, 0, 'x', 'x', 'x', :hash)"
            ),
            {"seq": through, "hash": prev},
        )
        conn.execute(
            text(
                "INSERT INTO audit_checkpoints (through_seq, last_hash, rows, segment,"
                " segment_sha256, at) VALUES (:seq, :hash, :seq, :segment, :digest, 0)"
            ),
            {"seq": through, "hash": prev, "segment": segment, "digest": digest},
        )
        conn.execute(text("DELETE FROM audit_log"))
        conn.execute(text("DELETE FROM deployment"))


@contextmanager
def started_again(runtime: Runtime, clock: FakeClock) -> Iterator[Runtime]:
    """A new process on the same database and secrets: nothing cached from before."""
    again = Runtime(runtime.settings, clock=clock)
    try:
        yield again
    finally:
        again.close()


def deployment_rows(runtime: Runtime) -> int:
    with runtime.store.reading() as conn:
        return len(conn.execute(select(deployment)).all())


@pytest.mark.parametrize("head", ["head exported", "no head here"])
def test_a_log_rewritten_behind_a_deleted_deployment_row_is_refused_and_reported(
    runtime: Runtime, clock: FakeClock, head: str
) -> None:
    """Refused whether or not the process starting finds the signed head: a worker may run
    where the head file is not (another machine, another secrets directory)."""
    append(runtime, 5)
    if head == "head exported":
        export_head(runtime, clock)
    rewrite_without_the_key(runtime)

    # The next process to start refuses the database.
    with started_again(runtime, clock) as restarted:
        with pytest.raises(ConfigError) as refused:
            _ = restarted.keyring
        assert str(refused.value).endswith(MISSING)
        # verify reports the row missing, and does not write one.
        found = problems(restarted)
        assert MISSING_ROW in found
        assert any("not signed with this deployment's key (forged)" in r for _, r in found)
        assert deployment_rows(restarted) == 0
        # So does the operator's command, where every other command refuses to start.
        returncode, report = verify_on_the_cli(restarted)
        assert returncode == 1 and not report["ok"]
        assert {"seq": None, "reason": MISSING_ROW[1]} in report["problems"]
        # Adopting the log as one from before the key is refused: the head names a row, and
        # the processes that found the row recorded it beside the key.
        evidence = "its signed head names seq 5" if head == "head exported" else "records its"
        with pytest.raises(ConfigError, match=evidence):
            restarted.adopt_key()
        assert deployment_rows(restarted) == 0


def forget_the_record(runtime: Runtime) -> None:
    """Remove what the processes recorded beside the key: a 0.1 deployment has none, and
    nor has a process run where the secrets folder is not."""
    record_file(runtime.settings, runtime.namespace.name).unlink()


def test_a_deleted_row_over_keyed_rows_cannot_be_adopted(
    runtime: Runtime, clock: FakeClock
) -> None:
    append(runtime, 3)
    # A plain row after them: every row is looked at, not only the newest.
    with runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM deployment"))
        plain = [{"at": 1, "tool": "t", "event": "queued", "actor": "x"} | NO_CALL]
        chained_plainly(plain)
        conn.execute(audit_log.insert(), [{**plain[0], "seq": 4}])
    forget_the_record(runtime)
    with started_again(runtime, clock) as restarted:
        with pytest.raises(ConfigError, match="row 1 is hashed with it"):
            restarted.adopt_key()
        assert deployment_rows(restarted) == 0


def test_a_log_archived_with_the_key_cannot_be_adopted(runtime: Runtime, clock: FakeClock) -> None:
    """Every keyed row archived away, no head, no record: the signed checkpoint still shows
    the key was used on this log."""
    append(runtime, 3)
    clock.advance(91 * 86_400_000)
    assert archive_old(runtime, clock).through_seq == 3
    with runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM deployment"))
    forget_the_record(runtime)
    with started_again(runtime, clock) as restarted:
        with pytest.raises(ConfigError, match="a checkpoint is signed with it"):
            restarted.adopt_key()
        assert deployment_rows(restarted) == 0


def test_adopting_without_the_deployments_key_makes_none(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    """Run where the key is not (another secrets folder), adopting would make a key and seal
    the database to it, and every process with the real key would refuse it."""
    elsewhere = runtime.settings.model_copy(update={"secrets_dir": tmp_path / "elsewhere"})
    again = Runtime(elsewhere, clock=clock)
    try:
        with pytest.raises(ConfigError, match="no secret key for this deployment"):
            again.adopt_key()
    finally:
        again.close()
    assert not (tmp_path / "elsewhere").exists()


def test_a_deployment_row_not_sealed_with_the_key_is_refused(
    runtime: Runtime, clock: FakeClock
) -> None:
    """The key's fingerprint copied, the boundary moved past every row, no seal: every
    later append would be chained without the key."""
    append(runtime, 3)
    with runtime.engine.begin() as conn:
        conn.execute(text("UPDATE deployment SET keyed_from_seq = 1000000000"))
    with started_again(runtime, clock) as restarted:
        with pytest.raises(ConfigError) as refused:
            _ = restarted.keyring
        assert str(refused.value).endswith(FORGED)
        assert (
            None,
            "the deployment row is not signed with this deployment's key (forged)",
        ) in problems(restarted)


def test_a_database_no_process_started_on_verifies_without_a_deployment_row(
    runtime: Runtime, clock: FakeClock
) -> None:
    with runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM deployment"))
    with started_again(runtime, clock) as fresh:
        assert problems(fresh) == []
        assert deployment_rows(fresh) == 0


def test_a_log_from_before_the_key_is_adopted_once_by_the_operator(
    runtime: Runtime, clock: FakeClock
) -> None:
    """A log written before the deployment had a key (0.1) is chained with plain SHA-256:
    processes refuse it until `toolrouter audit adopt-key` records where the keyed chain
    begins; then rows before it verify as a plain chain and rows after it with the key."""
    with runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM deployment"))
    forget_the_record(runtime)
    old: list[dict[str, object]] = [
        {"at": 1, "tool": "t", "event": "queued", "actor": "old"} | NO_CALL for _ in range(2)
    ]
    chained_plainly(old)
    with runtime.engine.begin() as conn:
        conn.execute(audit_log.insert(), old)
    with started_again(runtime, clock) as restarted:
        with pytest.raises(ConfigError, match="toolrouter audit adopt-key"):
            _ = restarted.keyring
        assert restarted.adopt_key().keyed_from_seq == 2
        with pytest.raises(ConfigError, match="already recorded as beginning after seq 2"):
            restarted.adopt_key()
    with started_again(runtime, clock) as adopted:
        assert adopted.deployment.keyed_from_seq == 2
        append(adopted, 2)
        export_head(adopted, clock)
        assert problems(adopted) == []
        assert adopted.verify_audit().checked == 4


def test_rows_of_types_the_log_never_writes_are_reported_not_a_crash(
    runtime: Runtime, clock: FakeClock
) -> None:
    """SQLite keeps any type in any column, so rows can be inserted that no writer makes;
    PostgreSQL's columns refuse them, and its log stays whole."""
    append(runtime, 3)
    odd_seq = (
        "INSERT INTO audit_log VALUES ('zzz', 1, 'add', 'ok', NULL, NULL, 'a', NULL, 'p', 'h')"
    )
    if runtime.engine.dialect.name != "sqlite":
        with pytest.raises(DBAPIError), runtime.engine.begin() as conn:
            conn.execute(text(odd_seq))
        assert problems(runtime) == []
        return
    with runtime.engine.begin() as conn:
        conn.execute(text(odd_seq))
        conn.execute(
            text(
                "INSERT INTO audit_log VALUES (4, 1, 'add', 'ok', NULL, NULL, 'a',"
                " CAST('{}' AS BLOB), 'p', 'h')"
            )
        )
    found = problems(runtime)
    assert (None, "a row whose seq is 'zzz': not a row this log writes") in found
    assert (4, "hash does not match the row (edited, or not written here)") in found
