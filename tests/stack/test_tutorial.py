"""docs/tutorial.md, executed: every step of it runs here, so the tutorial cannot rot.

The commands are the tutorial's own fenced blocks, read from the markdown at run time, with
only what differs on a test machine put in: the test interpreter's bin directory for
`.venv/bin/`, free ports for 8000 and 5555, and the real keys and ids for `trk_…`,
`call_…`, `req-…` and the example ids. Editing the tutorial changes what this test runs.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from router.status import TERMINAL_STATES

from ..browser.test_inbox import card, playwright_sync
from ..support import services
from ..support.chromium import CHROMIUM
from ..support.launcher import REPO, free_port
from ..support.services import IN_CI
from ..support.waiting import wait_for
from .test_up import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    UP_REDIS_DB,
    Up,
    banner_value,
    clean_env,
    kill_all,
    processes_of,
    wait_until_gone,
)

TUTORIAL = REPO / "docs" / "tutorial.md"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
BIN = Path(sys.executable).parent
# What an id of each kind looks like, and how the tutorial writes "the one you got".
ID_FORMS = {"call_id": r"call_[0-9a-f]{32}", "request_id": r"req-[0-9a-f]{32}"}
PLACEHOLDERS = {"call_id": "call_…", "request_id": "req-…"}


def read_tutorial() -> tuple[list[tuple[int, str, str]], dict[int, str]]:
    """The fenced blocks of docs/tutorial.md as (step, language, text), the step being the
    `## N.` they are under, and the prose of each step."""
    blocks: list[tuple[int, str, str]] = []
    prose: dict[int, str] = {}
    step, fence = 0, ""
    body: list[str] = []
    for line in TUTORIAL.read_text(encoding="utf-8").splitlines():
        if not fence and (m := re.match(r"^## (\d+)\. ", line)):
            step = int(m.group(1))
        elif not fence and (m := re.match(r"^```(\w+)\s*$", line)):
            fence, body = m.group(1), []
        elif fence and line.startswith("```"):
            blocks.append((step, fence, "\n".join(body) + "\n"))
            fence = ""
        elif fence:
            body.append(line)
        else:
            prose[step] = prose.get(step, "") + line + "\n"
    return blocks, prose


@dataclass
class Reader:
    """Someone following the tutorial: the project directory, a shell, what they have seen."""

    cwd: Path
    env: dict[str, str]
    api_port: int
    flower_port: int
    blocks: list[tuple[int, str, str]]
    prose: dict[int, str]
    agent_key: str = ""
    approver_key: str = ""
    # The tutorial's text (an example id, a placeholder) -> the real value it stands for.
    names: dict[str, str] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def block(self, step: int, lang: str, index: int = 0) -> str:
        found = [text for at, kind, text in self.blocks if (at, kind) == (step, lang)]
        assert len(found) > index, f"step {step} of the tutorial has no {lang} block #{index}"
        return found[index]

    def lines(self, step: int, index: int = 0) -> list[str]:
        return [line for line in self.block(step, "sh", index).splitlines() if line.strip()]

    def said(self, step: int, pattern: str) -> str:
        """What the prose of ``step`` says where ``pattern``'s group is."""
        match = re.search(pattern, self.prose[step])
        assert match, f"step {step} of the tutorial no longer says {pattern!r}"
        return match.group(1)

    def fill(self, text: str) -> str:
        text = text.replace(".venv/bin/", f"{BIN}/")
        text = re.sub(r"(localhost|127\.0\.0\.1):8000\b", rf"\g<1>:{self.api_port}", text)
        text = text.replace("127.0.0.1:5555", f"127.0.0.1:{self.flower_port}")
        for said in sorted(self.names, key=len, reverse=True):
            text = text.replace(said, self.names[said])
        return text

    def sh(self, script: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        """A block (or a line of one) in the reader's second terminal: the project directory,
        the same environment as `up`, and $KEY once step 2 has set it."""
        done = subprocess.run(
            ["bash", "-c", self.fill(script)],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == code, f"{script}\n{done.stdout}\n{done.stderr}"
        return done

    def expect_json(self, expected_text: str, actual: dict[str, Any]) -> None:
        """``actual`` is what the tutorial shows, ids apart; learn which ids they are."""
        expected = json.loads(expected_text)
        for key, form in ID_FORMS.items():
            if key in expected:
                assert re.fullmatch(form, str(actual.get(key))), actual
                self.names[expected[key]] = self.names[PLACEHOLDERS[key]] = actual[key]
        assert actual == json.loads(self.fill(expected_text))


class TutorialUp(Up):
    """`toolrouter up`, started with the tutorial's own command line."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()


def start_up(reader: Reader) -> TutorialUp:
    """Step 1's command, less the clone and install (done already), until the banner: `up`
    prints it once the API answers and every worker consumes, as the tutorial says."""
    command = next(c for c in reader.block(1, "sh").split("&&") if "toolrouter up" in c)
    up = TutorialUp(shlex.split(reader.fill(command)), reader.env, reader.cwd)
    try:
        up.wait_for("the banner", lambda lines: "toolrouter is up" in lines, START_TIMEOUT_S)
    except BaseException:  # pytest.fail's too: `up` is not the caller's to stop yet
        up.close()
        raise
    return up


def stop_up(up: TutorialUp) -> None:
    """Ctrl-C: `up` stops every process it started and exits 0."""
    started = psutil.Process(up.process.pid).children(recursive=True)
    up.process.send_signal(signal.SIGINT)
    up.wait_for("'stopped' after Ctrl-C", lambda lines: "stopped" in lines, STOP_TIMEOUT_S)
    assert up.process.wait(timeout=STOP_TIMEOUT_S) == 0, up.output[-4000:]
    up.close()
    assert not wait_until_gone(started, STOP_TIMEOUT_S)


def assert_banner(reader: Reader, output: str) -> None:
    """Each line of the tutorial's banner, in order, `…` standing for what differs."""
    lines, at = output.splitlines(), 0
    shown = reader.block(1, "text").replace("/path/to/toolrouter", str(reader.cwd.resolve()))
    for want in reader.fill(shown).splitlines():
        pattern = r"\s+".join(re.escape(word) for word in want.split()).replace("…", r"\S+?")
        at = next(
            (i + 1 for i in range(at, len(lines)) if re.fullmatch(pattern, lines[i].strip())), 0
        )
        assert at, f"banner line {want!r} not in the output of `up`:\n{output[-4000:]}"


def outcome(reader: Reader, call_id: str, settled: bool = True) -> dict[str, Any]:
    """The call as the agent reads it; with ``settled``, once a worker has run it (a call is
    released to its queue only after the decision)."""
    headers = {"Authorization": f"Bearer {reader.agent_key}"}
    with httpx.Client(base_url=reader.api, headers=headers, timeout=60) as http:

        def read() -> dict[str, Any]:
            wait = {"wait_s": 10} if settled else {}  # the API waits for the outcome
            body: dict[str, Any] = http.get(f"/v1/calls/{call_id}", params=wait).json()
            return body if not settled or body["status"] in TERMINAL_STATES else {}

        return wait_for(read, START_TIMEOUT_S, f"an outcome of {call_id}")


def approve_in_inbox(reader: Reader, url: str, request_id: str) -> dict[str, str]:
    """Sign in to the inbox with the demo approver key, read the request, approve it."""
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)  # a loaded machine: wait for readiness, not a clock
            page.goto(url)
            page.fill("#key", reader.approver_key)
            page.click("button[type=submit]")
            item = card(page, request_id)
            item.wait_for()
            seen = {c: item.locator(f".{c}").inner_text() for c in ("tool", "risk", "requester")}
            seen |= {"args": item.locator("pre.args").inner_text(), "card": item.inner_text()}
            seen["sha256"] = item.locator("code.hash").inner_text()
            item.locator("input[name=reason]").fill("customer called")
            item.locator("button[value=approve]").click()
            page.locator("#flash").wait_for()
            return seen | {"flash": page.locator("#flash").inner_text()}
        finally:
            browser.close()


@pytest.fixture
def redis_url(redis_base: str) -> Iterator[str]:
    # test_up's db: both flush it before and after, and the suite runs one test at a time.
    url = f"{redis_base}/{UP_REDIS_DB}"
    services.flush(url)
    yield url
    services.flush(url)


@pytest.mark.timeout(900)
def test_the_tutorial_runs_as_written(tmp_path: Path, redis_url: str) -> None:
    if not Path(CHROMIUM).exists():
        message = f"Chromium is needed for step 5 (the inbox) and is not at {CHROMIUM}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    # The project directory: the clone, as far as the tutorial uses it.
    cwd = tmp_path / "toolrouter"
    (cwd / "router").mkdir(parents=True)
    shutil.copy(REPO / "router" / "example_tools.yaml", cwd / "router")
    api_port, flower_port = free_port(), free_port()
    while flower_port == api_port:
        flower_port = free_port()
    env = clean_env(
        TOOLROUTER_REDIS_URL=redis_url,
        TOOLROUTER_API_PORT=str(api_port),
        TOOLROUTER_FLOWER_PORT=str(flower_port),
    )
    reader = Reader(cwd, env, api_port, flower_port, *read_tutorial())
    up: TutorialUp | None = None
    try:
        up = start_up(reader)
        step_1(reader, up.output)
        step_2(reader)
        step_3(reader)
        stop_up(up)  # "stop `toolrouter up` with Ctrl-C and start it again"
        up = start_up(reader)
        step_4(reader)
        step_5(reader)
        step_6(reader)
        step_7(reader)
        approvals_cli_on_pending_requests(reader)
        stop_up(up)
    finally:
        if up is not None:
            up.close()
        kill_all(processes_of(cwd / ".toolrouter"))


def step_1(reader: Reader, output: str) -> None:
    assert_banner(reader, output)
    reader.agent_key = banner_value(output, "demo agent key")
    reader.approver_key = banner_value(output, "demo approver key")
    reader.names["trk_…"] = reader.agent_key  # typed in step 2: `KEY=trk_…`
    reader.env["KEY"] = reader.agent_key  # and the reader's shell keeps $KEY from then on
    # The demo keys are kept beside the secret key, under the secrets directory.
    saved = Path(reader.env["TOOLROUTER_SECRETS_DIR"]).glob("*/demo-keys.json")
    tokens = [json.loads(path.read_text(encoding="utf-8")) for path in saved]
    assert {"agent": reader.agent_key, "approver": reader.approver_key} in tokens


def step_2(reader: Reader) -> None:
    # `toolrouter call` "exits 0 only when the call succeeded".
    call = reader.sh(reader.block(2, "sh", 0))
    reader.expect_json(reader.block(2, "json", 0), json.loads(call.stdout))
    curl = reader.sh(reader.block(2, "sh", 1))
    reader.expect_json(reader.block(2, "json", 1), json.loads(curl.stdout))


def step_3(reader: Reader) -> None:
    module = reader.said(3, r"Create `(\w+)\.py` in the project directory")
    (reader.cwd / f"{module}.py").write_text(reader.block(3, "python"), encoding="utf-8")
    config = reader.cwd / "toolrouter.yaml"
    assert not config.exists()
    reader.sh(reader.block(3, "sh"))
    builtin = re.findall(r"`(\w+)`", reader.said(3, r"built-in example tools \(([^)]*)\)"))
    copied = [tool["name"] for tool in yaml.safe_load(config.read_text())["tools"]]
    assert sorted(copied) == sorted(builtin)
    # "at the end of the `tools:` list": the copy ends with that list.
    with config.open("a", encoding="utf-8") as handle:
        handle.write(reader.block(3, "yaml"))
    tools = yaml.safe_load(config.read_text(encoding="utf-8"))["tools"]
    assert [tool["name"] for tool in tools] == [*copied, "refund"]


def step_4(reader: Reader) -> None:
    command = reader.block(4, "sh")
    # Pending: "The command exits 1: the call has not succeeded yet."
    reader.expect_json(reader.block(4, "json"), json.loads(reader.sh(command, 1).stdout))
    call_id = reader.names["call_…"]
    bad = reader.said(4, r"try `(--args '[^`]*')`")
    refused = json.loads(reader.sh(re.sub(r"--args '[^']*'", lambda _: bad, command), 1).stdout)
    assert refused["ok"] is False and refused["status"] == "rejected", refused
    assert "amount" in refused["error"], refused
    assert outcome(reader, call_id, settled=False)["status"] == "pending"  # it has not run


def step_5(reader: Reader) -> None:
    request_id, call_id = reader.names["req-…"], reader.names["call_…"]
    inbox = reader.fill(reader.said(5, r"Open \[(\S+?)\]"))
    seen = approve_in_inbox(reader, inbox, request_id)
    # "its tool, risk, arguments (and their SHA-256), requester, age and time left"
    assert (seen["tool"], seen["risk"], seen["requester"]) == ("refund", "high", "demo-agent")
    assert json.loads(seen["args"]) == {"order": "A-1001", "amount": 25}
    assert re.fullmatch(r"[0-9a-f]{64}", seen["sha256"]), seen
    assert "age" in seen["card"] and "expires in" in seen["card"], seen
    assert f"{request_id}: approved" in seen["flash"], seen
    # The worker runs it; then read the outcome as the tutorial does.
    assert outcome(reader, call_id)["status"] == "succeeded"
    curl = reader.sh(reader.block(5, "sh", 0))
    reader.expect_json(reader.block(5, "json"), json.loads(curl.stdout))
    # The command-line block, run now: nothing waits, and the request was decided once.
    listed, approve, deny = reader.lines(5, 1)
    assert "no pending requests" in reader.sh(listed).stdout
    answer = reader.fill(reader.said(5, r"approving it again answers `([^`]+)`"))
    assert answer in reader.sh(approve, 1).stdout
    assert answer in reader.sh(deny, 1).stdout


def step_6(reader: Reader) -> None:
    tail, verify = reader.lines(6)
    assert tail.endswith(" --last 3"), tail
    # The rows the prose names, in the order of the steps: two adds, the refund and the
    # arguments refused in step 4; the refusals of step 5's commands leave none.
    listing = reader.sh(tail.removesuffix(" --last 3")).stdout.splitlines()
    events = [json.loads(row)["event"] for row in listing]
    assert events == ["queued", "ok", "queued", "ok", "pending", "invalid", "approved", "ok"]
    assert set(events) <= set(re.findall(r"`(\w+)`", reader.prose[6]))
    shown = [json.loads(line)["event"] for line in reader.sh(tail).stdout.splitlines()]
    assert shown == events[-3:]
    # The approval worker exports the signed head every few seconds: wait until it names
    # the last row, as it does by the time a reader has typed the command.
    expected = reader.block(6, "text")
    n = len(events)
    summary = f"audit chain ok: {n} rows verified in the database\n"
    assert expected == f"signed head found: seq {n}\n{summary}"
    assert reader.sh(verify).stdout.endswith(f"\n{summary}")
    wait_for(
        lambda: reader.sh(verify).stdout == expected, START_TIMEOUT_S, "a head at the last row"
    )


def step_7(reader: Reader) -> None:
    tokens = {}
    for line in reader.lines(7):
        printed = reader.sh(line).stdout.splitlines()
        # "Each prints its token once, alone on the last line."
        assert re.fullmatch(r"trk_\S+", printed[-1]), printed
        assert sum(printed[-1] in shown for shown in printed) == 1, printed
        tokens[line.split("--name ")[1].split()[0]] = printed[-1]
    # "Alice can now sign in to the inbox; the bot calls with `--key`".
    with httpx.Client(base_url=reader.api, timeout=60) as http:
        signed = http.post(
            "/ui/login", data={"key": tokens["alice"]}, headers={"Origin": reader.api}
        )
        assert signed.status_code == 303, signed.text
        assert "Waiting for you" in http.get("/ui/").text
    call_add = reader.block(2, "sh", 0).replace(" --wait", f" --key {tokens['billing-bot']} --wait")
    assert json.loads(reader.sh(call_add).stdout)["value"] == 3
    # "Revoke with `toolrouter keys revoke NAME`".
    revoke = reader.said(7, r"Revoke with `(toolrouter keys revoke) NAME`")
    revoked = reader.sh(f".venv/bin/{revoke} billing-bot").stdout
    assert revoked == "revoked key 'billing-bot'\n", revoked


def approvals_cli_on_pending_requests(reader: Reader) -> None:
    """Step 5's command-line block on requests that wait: two more refunds."""
    waiting = []
    for _ in range(2):
        reader.expect_json(
            reader.block(4, "json"), json.loads(reader.sh(reader.block(4, "sh"), 1).stdout)
        )
        waiting.append((reader.names["req-…"], reader.names["call_…"]))
    listed, approve, deny = reader.lines(5, 1)
    shown = reader.sh(listed).stdout
    for request_id, _ in waiting:
        assert f"{request_id}  refund  by demo-agent" in shown, shown
    # "`approve --wait 30` waits for the released call and prints its result": the result
    # step 5 shows, for this call.
    reader.names["req-…"], _ = waiting[0]
    reader.expect_json(reader.block(5, "json"), json.loads(reader.sh(approve).stdout))
    reader.names["req-…"], call_id = waiting[1]
    denied = json.loads(reader.sh(deny).stdout)
    assert denied["ok"] is True and denied["status"] == "denied", denied
    assert outcome(reader, call_id, settled=False)["status"] == "denied"
