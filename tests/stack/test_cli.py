"""The `toolrouter` command for people, run as a subprocess on real databases (SPEC §9, §13)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from router.audit.log import AuditEntry
from router.auth.key_cache import TTL_S
from router.constants import KEYS_CHANGED_CHANNEL
from router.db.migrate import head_revision
from router.errors import NotAuthenticated
from router.messaging.namespace import Namespace
from router.runtime import Runtime
from router.settings import Settings
from router.status import AuditEvent

from ..support import services
from ..support.launcher import free_port, stop_group, wait_for_log
from ..support.stack import Stack

EXAMPLE_TOOLS = {"echo", "add", "sleep", "fail", "wire"}
# Redis db of these tests (the README reserves 10-15 for the test-suite).
CLI_REDIS_DB = 14


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any TOOLROUTER_* variable, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLROUTER_")}
    # Each test's deployment keeps its key material in the tests' own secrets folder.
    env["TOOLROUTER_SECRETS_DIR"] = os.environ["TOOLROUTER_SECRETS_DIR"]
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def toolrouter(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return python(*["-m", "router.cli.main", *args], env=env, cwd=cwd, timeout=timeout)


def python(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """This interpreter run with ``args``, no input, its output captured as text."""
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class Home:
    """A fresh working directory (no toolrouter.yaml) and state directory, as a user has."""

    def __init__(self, tmp: Path, **extra: str) -> None:
        self.cwd, self.state_dir = tmp / "cwd", tmp / "state"
        self.cwd.mkdir(parents=True)
        self.env = clean_env(TOOLROUTER_STATE_DIR=str(self.state_dir), **extra)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return toolrouter(*args, env=self.env, cwd=self.cwd, timeout=timeout)

    def settings(self) -> Settings:
        return Settings(
            state_dir=self.state_dir,
            database_url=self.env.get("TOOLROUTER_DATABASE_URL", ""),
        )


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def authenticate(settings: Settings, token: str) -> frozenset[str]:
    """The roles of ``token`` by the same settings the CLI used; raises if it is refused."""
    runtime = Runtime(settings)
    try:
        return runtime.keys.authenticate(token).roles
    finally:
        runtime.close()


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


# -- keys ---------------------------------------------------------------------------------------


def test_keys_create_prints_the_token_alone_on_the_last_line(home: Home) -> None:
    out = ok(home.run("keys", "create", "--name", "ci-agent", "--role", "agent"))
    assert out.endswith("\n")
    lines = out.splitlines()
    token = lines[-1]
    assert token and token == token.strip() and " " not in token
    # Printed once: nowhere else in the output.
    assert all(token not in line for line in lines[:-1])
    assert authenticate(home.settings(), token) == {"agent"}


def test_keys_create_outside_a_deployment_says_it_made_one(home: Home) -> None:
    """Run in the wrong folder it makes a new deployment, whose keys a running one elsewhere
    refuses: said on stderr, once; a second key in the same place is not told again."""
    first = home.run("keys", "create", "--name", "one", "--role", "agent")
    database = (home.state_dir / "toolrouter.db").resolve()
    assert first.returncode == 0, first.stderr
    assert f"note: there was no deployment here: this made one ({database}" in first.stderr
    second = home.run("keys", "create", "--name", "two", "--role", "agent")
    assert second.returncode == 0 and "note:" not in second.stderr, second.stderr


def test_keys_create_works_with_tail_n1(home: Home) -> None:
    """The documented idiom: KEY=$(toolrouter keys create … | tail -n1)."""
    script = (
        'set -e; KEY=$("$0" -m router.cli.main keys create --name piped --role agent '
        '--role finance | tail -n1); printf %s "$KEY"'
    )
    result = subprocess.run(
        ["sh", "-c", script, sys.executable],
        env=home.env,
        cwd=home.cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    token = ok(result)
    assert authenticate(home.settings(), token) == {"agent", "finance"}


def test_keys_create_with_a_taken_name_fails_clearly(home: Home) -> None:
    first = ok(home.run("keys", "create", "--name", "twin", "--role", "agent")).splitlines()[-1]
    again = home.run("keys", "create", "--name", "twin", "--role", "admin")
    assert again.returncode != 0
    assert "twin" in again.stderr and "already exists" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr
    assert again.stdout == ""  # no second token, not even a partial announcement
    # The original key is untouched.
    assert authenticate(home.settings(), first) == {"agent"}


@pytest.mark.parametrize(
    "name", ["twin ", " twin", "twin\u2800", "\u3164twin", "", "t" * 129, "tw\u200bin"]
)
def test_keys_create_refuses_a_name_that_reads_as_another(home: Home, name: str) -> None:
    """A name with a space at either end, or one that does not print, would make two keys
    look alike in the audit log and in every listing."""
    result = home.run("keys", "create", "--name", name, "--role", "agent")
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip() == (
        "error: key name must be 1-128 printable characters, none blank at either end"
    ), result.stderr


@pytest.mark.parametrize("role", ["", "a,operator", "operator\u200b"])
def test_keys_create_refuses_a_role_that_reads_as_another(home: Home, role: str) -> None:
    result = home.run("keys", "create", "--name", "odd-role", "--role", role)
    assert result.returncode != 0 and result.stdout == ""
    rule = "error: role must be 1-64 printable characters, none blank at either end, no comma"
    assert f"{rule}: {json.dumps(role)}\n" in result.stderr, result.stderr


ONE_WAY = (
    "must be written one way: no decomposed accents, no compatibility forms (fullwidth,"
    " mathematical, circled or superscript letters, ligatures, Roman numerals), no dash but -"
)


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        (
            "--role",
            "\u0430dmin",
            'error: role mixes Latin, Cyrillic or Greek letters: "\\u0430dmin"',
        ),
        (
            "--name",
            "\u0430lice",
            'error: key name mixes Latin, Cyrillic or Greek letters: "\\u0430lice"',
        ),
        (
            "--name",
            "Jose\u0301",
            f'error: key name {ONE_WAY}: "Jose\\u0301"',
        ),
        (
            "--role",
            "\uff41dmin",
            f'error: role {ONE_WAY}: "\\uff41dmin"',
        ),
    ],
    ids=["role", "name", "decomposed-name", "fullwidth-role"],
)
def test_keys_create_refuses_look_alike_letters(
    home: Home, option: str, value: str, error: str
) -> None:
    """ "admin" with a Cyrillic \u0430 first reads as "admin" and would grant nothing."""
    given = {"--name": "look-alike", "--role": "agent", option: value}
    result = home.run("keys", "create", *[part for pair in given.items() for part in pair])
    assert result.returncode != 0 and result.stdout == ""
    assert f"{error}\n" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("garbage", "not a Redis URL"),
        ("redis://127.0.0.1:99999/5", "not a Redis URL"),
        ("redis://127.0.0.1:6379/abc", "a Redis URL's database is a number"),
    ],
)
def test_a_redis_url_no_client_takes_is_refused_before_a_key_is_revoked(
    home: Home, url: str, error: str
) -> None:
    """Not revoked, then told as failed with a traceback: nothing changes, one line."""
    ok(home.run("keys", "create", "--name", "kept", "--role", "agent"))
    home.env["TOOLROUTER_REDIS_URL"] = url
    result = home.run("keys", "revoke", "kept")
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"error: TOOLROUTER_REDIS_URL: {error}"), result.stderr
    assert "Traceback" not in result.stderr and url not in result.stderr
    del home.env["TOOLROUTER_REDIS_URL"]
    assert ok(home.run("keys", "list")).split("\t")[2].strip() == "active"


def test_keys_revoke_makes_the_token_refused(home: Home) -> None:
    token = ok(home.run("keys", "create", "--name", "leaving", "--role", "agent")).splitlines()[-1]
    keep = ok(home.run("keys", "create", "--name", "staying", "--role", "agent")).splitlines()[-1]
    assert authenticate(home.settings(), token) == {"agent"}
    ok(home.run("keys", "revoke", "leaving"))
    with pytest.raises(NotAuthenticated):
        authenticate(home.settings(), token)
    assert authenticate(home.settings(), keep) == {"agent"}
    listed = ok(home.run("keys", "list"))
    assert token not in listed and keep not in listed  # tokens are never shown again
    states = dict(line.split("\t")[0::2] for line in listed.splitlines())
    assert states == {"leaving": "revoked", "staying": "active"}
    # Revoked twice: said as it is, not as a key that does not exist.
    again = home.run("keys", "revoke", "leaving")
    assert (again.returncode, again.stderr) == (2, "error: key already revoked: leaving\n")


def test_keys_revoke_says_when_an_api_process_did_not_confirm(
    tmp_path: Path, redis_base: str
) -> None:
    """A listener on the revocation channel that never acknowledges (an API process stalled
    or gone): the revocation stands, and the operator learns how soon it holds everywhere."""
    redis_url = f"{redis_base}/{CLI_REDIS_DB}"
    home = Home(tmp_path, TOOLROUTER_REDIS_URL=redis_url)
    ok(home.run("keys", "create", "--name", "leaving", "--role", "agent"))
    alone = home.run("keys", "revoke", "leaving")
    assert (ok(alone), alone.stderr) == ("revoked key 'leaving'\n", "")  # no API listening
    token = ok(home.run("keys", "create", "--name", "second", "--role", "agent")).splitlines()[-1]
    channel = Namespace.of(home.settings()).key(KEYS_CHANGED_CHANNEL)
    with redis.Redis.from_url(redis_url) as client, client.pubsub() as stalled:
        stalled.subscribe(channel)
        stalled.get_message(timeout=30)  # the subscription stands
        result = home.run("keys", "revoke", "second")
    assert ok(result) == "revoked key 'second'\n"
    assert result.stderr == (
        f"warning: 1 of 1 API processes did not confirm; each refuses the key within {TTL_S:g} s\n"
    )
    with pytest.raises(NotAuthenticated):
        authenticate(home.settings(), token)


def test_keys_create_warns_of_a_role_nothing_names_and_still_makes_the_key(home: Home) -> None:
    (home.cwd / "toolrouter.yaml").write_text(
        "tools:\n  - {name: pay, handler: 'router.tools.demo_tools:add', risk: high,"
        " approvers: [finance]}\n",
        encoding="utf-8",
    )
    ok(home.run("keys", "create", "--name", "first", "--role", "agent"))  # the deployment
    typo = home.run("keys", "create", "--name", "typo", "--role", "agnet")
    assert typo.returncode == 0, typo.stderr
    assert typo.stderr == (
        "warning: role 'agnet' is named by no tool in the config; did you mean agent?\n"
    )
    for role in ("finance", "approver"):  # a tool's custom role, a built-in one
        named = home.run("keys", "create", "--name", role, "--role", role)
        assert (named.returncode, named.stderr) == (0, "")
    assert "typo\t" in ok(home.run("keys", "list"))


def test_keys_revoke_of_an_unknown_name_fails_clearly(home: Home) -> None:
    ok(home.run("keys", "create", "--name", "somebody", "--role", "agent"))
    result = home.run("keys", "revoke", "nobody")
    assert result.returncode != 0
    assert "nobody" in result.stderr and "Traceback" not in result.stderr


# -- database schema ----------------------------------------------------------------------------


@pytest.mark.postgres
def test_commands_refuse_an_old_postgres_schema_until_db_upgrade(
    tmp_path: Path, empty_pg_database: str
) -> None:
    home = Home(tmp_path, TOOLROUTER_DATABASE_URL=empty_pg_database)
    for command in (["keys", "list"], ["keys", "create", "--name", "x", "--role", "agent"]):
        refused = home.run(*command)
        assert refused.returncode != 0, command
        assert "toolrouter db upgrade" in refused.stderr, (command, refused.stderr)
        assert "Traceback" not in refused.stderr
    upgraded = ok(home.run("db", "upgrade"))
    assert str(head_revision()) in upgraded
    ok(home.run("db", "upgrade"))  # again: nothing to do, still fine
    token = ok(home.run("keys", "create", "--name", "pg", "--role", "operator")).splitlines()[-1]
    assert authenticate(home.settings(), token) == {"operator"}
    assert ok(home.run("keys", "list")).startswith("pg\t")
    assert "ok" in ok(home.run("audit", "verify"))
    # The state directory holds no SQLite database: PostgreSQL is the one in use.
    assert not (home.state_dir / "toolrouter.db").exists()


@pytest.mark.postgres
def test_up_refuses_an_old_postgres_schema_in_one_line_and_says_nothing_of_stopping(
    tmp_path: Path, empty_pg_database: str, redis_base: str
) -> None:
    home = Home(
        tmp_path,
        TOOLROUTER_DATABASE_URL=empty_pg_database,
        TOOLROUTER_REDIS_URL=f"{redis_base}/{CLI_REDIS_DB}",
        TOOLROUTER_API_PORT=str(free_port()),
        TOOLROUTER_FLOWER_PORT=str(free_port()),
    )
    refused = home.run("up")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    # Nothing was started, so nothing was stopped.
    assert refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: database schema is at nothing"), refused.stderr
    assert "toolrouter db upgrade" in refused.stderr


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_beat_starts_on_postgres_with_a_state_dir_that_does_not_exist_yet(
    tmp_path: Path, pg_template: None, redis_base: str
) -> None:
    """Beat keeps its schedule file in the state dir; on PostgreSQL nothing else creates it."""
    database = services.fresh_pg_database()
    redis_url = f"{redis_base}/{CLI_REDIS_DB}"
    services.flush(redis_url)
    home = Home(
        tmp_path,
        TOOLROUTER_DATABASE_URL=services.pg_url(database),
        TOOLROUTER_REDIS_URL=redis_url,
        TOOLROUTER_REAPER_INTERVAL_S="1",
    )
    assert not home.state_dir.exists()
    log = tmp_path / "beat.log"
    try:
        with log.open("wb") as out:
            beat = subprocess.Popen(
                [sys.executable, "-m", "router.cli.main", "beat"],
                env=home.env,
                cwd=home.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            try:
                wait_for_log(log, "Sending due task reap-lost-runs", beat, timeout=60)
            except RuntimeError:
                text = log.read_text(errors="replace")
                pytest.fail(f"beat did not run (exit {beat.poll()}):\n{text[-1500:]}")
            assert beat.poll() is None, log.read_text(errors="replace")[-1500:]
            assert list(home.state_dir.glob("celerybeat-schedule*"))
        finally:
            stop_group(beat, signal.SIGTERM, timeout=20)
    finally:
        services.drop_pg_database(database)
        services.flush(redis_url)


# -- tools and audit ----------------------------------------------------------------------------


def test_tools_lists_the_example_tools_without_a_config_file(home: Home) -> None:
    assert not (home.cwd / "toolrouter.yaml").exists()
    out = ok(home.run("tools"))
    rows = [line.split("\t") for line in out.splitlines()]
    assert {row[0] for row in rows} == EXAMPLE_TOOLS
    by_name = {row[0]: row for row in rows}
    assert by_name["add"][1:3] == ["low", "ungated"]
    assert by_name["wire"][1:3] == ["high", "gated"]
    described = json.loads(ok(home.run("tools", "--json")))
    assert {tool["name"] for tool in described} == EXAMPLE_TOOLS


def test_route_ranks_the_example_tools_for_a_task(home: Home) -> None:
    out = ok(home.run("route", "compute the average of these numbers", "--limit", "2"))
    lines = out.splitlines()
    assert lines[0] == "strategy: hybrid"
    assert lines[1].split("\t")[0] == "add" and "matches numbers" in lines[1]
    assert len(lines) == 3
    answer = json.loads(ok(home.run("route", "add numbers", "--strategy", "lexical", "--json")))
    assert answer["strategy"] == "lexical" and answer["candidates"][0]["tool"] == "add"
    refused = home.run("route", "x", "--strategy", "llm")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "no LLM endpoint is configured" in refused.stderr


def test_tools_reports_a_broken_config_by_file_and_tool(home: Home) -> None:
    (home.cwd / "toolrouter.yaml").write_text(
        'tools:\n  - {name: twin, handler: "router.tools.demo_tools:echo"}\n'
        '  - {name: twin, handler: "router.tools.demo_tools:add"}\n',
        encoding="utf-8",
    )
    result = home.run("tools")
    assert result.returncode != 0
    assert "toolrouter.yaml" in result.stderr and "'twin'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_handlers_resolve_beside_the_config_file_from_any_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "shop_handlers.py").write_text(
        "def refund(args, ctx):\n    return args\n", encoding="utf-8"
    )
    config = project / "toolrouter.yaml"
    config.write_text(
        'tools:\n  - {name: refund, handler: "shop_handlers:refund", risk: high}\n',
        encoding="utf-8",
    )
    # As Claude Desktop starts `toolrouter mcp`: from some other directory.
    elsewhere = Home(tmp_path / "elsewhere-home", TOOLROUTER_CONFIG=str(config))
    out = ok(elsewhere.run("tools"))
    assert [line.split("\t")[:3] for line in out.splitlines()] == [["refund", "high", "gated"]]


def test_a_named_config_that_does_not_exist_is_an_error_not_the_example_tools(
    tmp_path: Path,
) -> None:
    named = tmp_path / "typo.yaml"
    home = Home(tmp_path / "home", TOOLROUTER_CONFIG=str(named))
    result = home.run("tools")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: config error: TOOLROUTER_CONFIG names {str(named)!r}, which does not exist"
    )


def test_audit_verify_is_ok_on_a_new_deployment(home: Home) -> None:
    ok(home.run("db", "upgrade"))
    assert "audit chain ok: 0 rows verified in the database" in ok(home.run("audit", "verify"))


def test_init_run_again_writes_nothing_and_names_the_files_that_exist(home: Home) -> None:
    assert ok(home.run("init")).startswith("wrote toolrouter.yaml\nwrote my_tools.py\n")
    both = home.run("init")
    assert both.returncode == 2, both.stdout + both.stderr
    assert both.stderr == "error: toolrouter.yaml, my_tools.py already exist; nothing written\n"
    (home.cwd / "my_tools.py").unlink()
    one = home.run("init")
    assert one.returncode == 2, one.stdout + one.stderr
    assert one.stderr == "error: toolrouter.yaml already exists; nothing written\n"
    assert not (home.cwd / "my_tools.py").exists()


# -- calls through a running API ----------------------------------------------------------------


def stack_cli_env(stack: Stack, **extra: str) -> dict[str, str]:
    port = stack.base_url.rsplit(":", 1)[1]
    return {**stack.env, "TOOLROUTER_API_PORT": port, **extra}


def test_call_prints_the_result_json_and_exits_0(stack: Stack, tmp_path: Path) -> None:
    # The stack serves tests/tools.yaml, whose `echo` returns its arguments.
    result = toolrouter(
        "call",
        "echo",
        "--args",
        '{"a": 1, "b": 2}',
        "--wait",
        "10",
        "--key",
        stack.keys["agent"],
        env=stack_cli_env(stack),
        cwd=tmp_path,
    )
    body = json.loads(ok(result))
    assert body["ok"] is True
    assert body["status"] == "succeeded"
    assert body["tool"] == "echo"
    assert body["value"] == {"a": 1, "b": 2}


def test_cancel_cancels_a_pending_call_once(stack: Stack, tmp_path: Path) -> None:
    with stack.client() as http:
        call = http.post("/v1/calls", json={"tool": "high_echo", "args": {"to": "cli"}}).json()
    assert call["status"] == "pending", call
    env = stack_cli_env(stack, TOOLROUTER_KEY=stack.keys["agent"])
    cancelled = toolrouter("cancel", call["call_id"], env=env, cwd=tmp_path)
    assert json.loads(ok(cancelled))["status"] == "cancelled"
    again = toolrouter("cancel", call["call_id"], env=env, cwd=tmp_path)
    assert again.returncode == 1
    assert json.loads(again.stdout)["error"].startswith("call is cancelled")
    unknown = toolrouter("cancel", "call_nope", env=env, cwd=tmp_path)
    assert unknown.returncode == 1
    assert json.loads(unknown.stdout)["error"].startswith("unknown call")


def test_call_takes_the_key_from_toolrouter_key(stack: Stack, tmp_path: Path) -> None:
    env = stack_cli_env(stack, TOOLROUTER_KEY=stack.keys["agent"])
    result = toolrouter(
        "call", "value", "--args", '{"value": 0}', "--wait", "10", env=env, cwd=tmp_path
    )
    assert json.loads(ok(result))["value"] == 0


def test_call_that_does_not_succeed_exits_non_zero(stack: Stack, tmp_path: Path) -> None:
    env = stack_cli_env(stack)
    unknown = toolrouter(
        "call", "no_such_tool", "--wait", "10", "--key", stack.keys["agent"], env=env, cwd=tmp_path
    )
    assert unknown.returncode != 0
    assert json.loads(unknown.stdout)["ok"] is False
    refused = toolrouter(
        "call", "echo", "--wait", "10", "--key", "not-a-key", env=env, cwd=tmp_path
    )
    assert refused.returncode != 0
    assert json.loads(refused.stdout)["ok"] is False
    assert "Traceback" not in unknown.stderr + refused.stderr
    typo = toolrouter("call", "ehco", "--key", stack.keys["agent"], env=env, cwd=tmp_path)
    assert typo.returncode == 1
    assert typo.stderr.strip().startswith("did you mean: echo"), typo.stderr
    # An empty key is the API's to refuse: dropped, a retry would make a second call.
    no_key = toolrouter(
        "call", "echo", "--idempotency-key", "", "--key", stack.keys["agent"], env=env, cwd=tmp_path
    )
    assert no_key.returncode == 1
    assert "idempotency_key must be" in json.loads(no_key.stdout)["error"], no_key.stdout


def test_approvals_without_a_subcommand_shows_help_and_starts_nothing(home: Home) -> None:
    shown = home.run("approvals", timeout=60)
    assert "list" in shown.stdout + shown.stderr and "approve" in shown.stdout + shown.stderr
    assert "Usage" in shown.stdout + shown.stderr
    assert not home.state_dir.exists()


def test_a_command_that_cannot_reach_the_api_says_where_it_looked(tmp_path: Path) -> None:
    port = free_port()  # nothing listens on it
    home = Home(tmp_path, TOOLROUTER_API_PORT=str(port))
    result = home.run("approvals", "list", "--key", "trk_unused", timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    where = f"error: cannot reach the API at http://127.0.0.1:{port}/v1/approvals"
    assert result.stderr.startswith(where), result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_key_a_header_cannot_carry_is_refused_by_name(tmp_path: Path) -> None:
    home = Home(tmp_path, TOOLROUTER_API_PORT=str(free_port()))
    # A trailing line break, as a key read from a file has, is not part of the key.
    trailing = home.run("approvals", "list", "--key", "trk_unused\n", timeout=60)
    assert trailing.stderr.startswith("error: cannot reach the API at"), trailing.stderr
    inside = home.run("approvals", "list", "--key", "trk_un\nused", timeout=60)
    assert inside.returncode == 2, inside.stdout + inside.stderr
    assert "the key has characters an HTTP header cannot carry" in inside.stderr
    assert "Traceback" not in trailing.stderr + inside.stderr


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        (
            "TOOLROUTER_REDIS_URL",
            "sentinel://127.0.0.1:26379",
            "error: TOOLROUTER_REDIS_URL is a sentinel:// URL: set "
            "TOOLROUTER_REDIS_SENTINEL_MASTER",
        ),
        ("TOOLROUTER_API_PORT", "eighty", "error: TOOLROUTER_API_PORT: Input should be"),
    ],
)
def test_a_setting_that_cannot_be_used_is_named_without_a_traceback(
    tmp_path: Path, setting: str, value: str, message: str
) -> None:
    home = Home(tmp_path, **{setting: value})
    result = home.run("status")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def upgraded_with_audit_rows(home: Home, count: int) -> None:
    """The deployment's schema made, then ``count`` audit rows long past any hot window."""
    ok(home.run("db", "upgrade"))
    runtime = Runtime(home.settings())
    try:
        log = runtime.audit  # made before the write transaction: it reads the database
        with runtime.store.transaction() as conn:
            rows = [AuditEntry(AuditEvent.QUEUED, "agent", tool=f"t{n}") for n in range(count)]
            log.append(conn, rows, at=1)
    finally:
        runtime.close()


def test_audit_list_shows_the_first_or_the_last_rows_oldest_first(home: Home) -> None:
    upgraded_with_audit_rows(home, 5)
    every = [json.loads(line)["seq"] for line in ok(home.run("audit", "list")).splitlines()]
    assert len(every) >= 5 and every == sorted(every)
    first = ok(home.run("audit", "list", "--limit", "2")).splitlines()
    last = ok(home.run("audit", "list", "--last", "2")).splitlines()
    assert [json.loads(line)["seq"] for line in first] == every[:2]
    assert [json.loads(line)["seq"] for line in last] == every[-2:]
    for bad in (["--limit", "-1"], ["--last", "0"], ["--after-seq", "-5"]):
        refused = home.run("audit", "list", *bad)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr


# -- odd input: one line, exit 2, nothing changed ---------------------------------------------


def test_an_argument_that_is_not_utf8_is_a_usage_error_where_it_would_be_sent(
    home: Home,
) -> None:
    """Its bytes are shown as given; nothing is sent."""
    home.env["TOOLROUTER_API_PORT"] = str(free_port())
    result = home.run("call", "echo", "--key", "x", "--args", '{"a": "\udcff"}')
    assert result.returncode == 2, result
    assert 'Error: not UTF-8 text: "echo","args":{"a":"\\xff"}}' in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_path_that_is_not_utf8_is_a_path_all_the_same(home: Home) -> None:
    """Linux paths are bytes: a folder named in Latin-1 is written to as named."""
    folder = os.fsdecode(b"caf\xe9")
    # Bytes out, as the command prints the path it wrote to as given.
    result = subprocess.run(
        [sys.executable, "-m", "router.cli.main", "init", "--dir", folder],
        env=home.env,
        cwd=home.cwd,
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (home.cwd / folder / "toolrouter.yaml").is_file()


@pytest.mark.parametrize("command", [["call", "echo"], ["approvals", "approve", "req-x"]])
def test_args_nested_too_deeply_are_a_usage_error(home: Home, command: list[str]) -> None:
    nested = '{"a": ' * 5000 + "1" + "}" * 5000
    result = home.run(*command, "--args", nested)
    assert result.returncode == 2, result
    assert "nested too deeply" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("saved", ['{"agent": "trk_', "[]"])
def test_demo_keys_that_are_not_what_up_wrote_are_named(
    home: Home, tmp_path: Path, saved: str
) -> None:
    secrets = tmp_path / "secrets"
    home.env["TOOLROUTER_SECRETS_DIR"] = str(secrets)
    ok(home.run("keys", "create", "--name", "someone", "--role", "agent"))  # the deployment
    (keys_file,) = secrets.glob("*/secret.key")
    demo = keys_file.parent / "demo-keys.json"
    demo.write_text(saved, encoding="utf-8")
    result = home.run("call", "echo")
    assert result.returncode == 2, result
    assert str(demo) in result.stderr and "pass --key or set TOOLROUTER_KEY" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("target", ["moved.yaml", "toolrouter.yaml"], ids=["gone", "loop"])
def test_a_config_link_that_leads_to_no_file_is_an_error_not_the_example_tools(
    home: Home, target: str
) -> None:
    (home.cwd / "toolrouter.yaml").symlink_to(home.cwd / target)
    result = home.run("tools")
    assert result.returncode == 2, result
    assert result.stderr == (
        "error: config error: 'toolrouter.yaml' is a link that leads to no file\n"
    )
    status = home.run("status")
    config = home.cwd / "toolrouter.yaml"
    assert f"config     {config} (a link that leads to no file)" in status.stdout, status


def test_status_where_there_is_no_deployment_makes_none(home: Home) -> None:
    """Else its empty database would pass for a deployment: keys create would no longer
    say it made one."""
    result = home.run("status")
    assert result.returncode == 1, result
    database = home.state_dir / "toolrouter.db"
    assert f"no deployment here: {database} does not exist" in result.stdout
    assert not database.exists()
    created = home.run("keys", "create", "--name", "first", "--role", "agent")
    assert created.returncode == 0 and "there was no deployment here" in created.stderr
