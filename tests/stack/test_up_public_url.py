"""``toolrouter up`` bound to every interface, with approvers to notify and no public URL,
says at start which address the notifications' inbox links will name, and how to set it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ..support.launcher import REPO, free_port
from .test_up import START_TIMEOUT_S, Up, kill_all, processes_of, up_env, up_redis_url

__all__ = ["up_redis_url"]  # the fixture, shared with test_up

WARNING = "warning: TOOLROUTER_PUBLIC_URL is unset"
NOTIFICATIONS = """
notifications:
  channels:
    hook:
      type: webhook
      url: "http://127.0.0.1:{port}/hook"
      secret: "${{UP_HOOK_SECRET}}"
  roles:
    approver: [hook]
"""


@pytest.mark.timeout(300)
def test_up_bound_to_every_interface_warns_which_address_links_will_name(
    tmp_path: Path, up_redis_url: str
) -> None:
    cwd, state_dir = tmp_path / "cwd", tmp_path / "state"
    env = up_env(
        cwd,
        state_dir,
        up_redis_url,
        TOOLROUTER_API_HOST="0.0.0.0",
        UP_HOOK_SECRET="whsec-up-0123456789abcdef",
    )
    example = (REPO / "router" / "example_tools.yaml").read_text(encoding="utf-8")
    config = example + NOTIFICATIONS.format(port=free_port())  # nothing is sent there
    (cwd / "toolrouter.yaml").write_text(config, encoding="utf-8")
    up = Up(env, cwd)
    try:
        # Printed before any process starts; the test stops `up` there.
        up.wait_for(
            "the public URL warning",
            lambda lines: any(line.startswith(WARNING) for line in lines),
            START_TIMEOUT_S,
        )
        (line,) = [line for line in up.lines if line.startswith(WARNING)]
        link = f"http://{socket.gethostname()}:{env['TOOLROUTER_API_PORT']}/ui/"
        assert f"links in notifications read {link};" in line, line
        assert line.endswith("set it to the address approvers open the inbox at")
    finally:
        up.close()
        kill_all(processes_of(state_dir))
