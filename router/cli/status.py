"""``toolrouter status``: a deployment at a glance, for people and for scripts."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from ..canonical import shown_as_text
from .children import api_port, running_file, served_config
from .common import get_settings, local_url
from .preflight import up_holds_state_dir

if TYPE_CHECKING:
    from ..settings import Settings

# How long workers get to answer "which queues do you consume?".
INSPECT_TIMEOUT_S = 1.5


@click.command()
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object")
def status(as_json: bool) -> None:
    """Processes and their health, workers per queue, queue depths, pending approvals, the
    database, Redis and the config in use; exits 1 when something is down."""
    report = gather(get_settings())
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        click.echo(render(report))
    sys.exit(0 if report["healthy"] else 1)


def gather(settings: Settings) -> dict[str, Any]:
    from ..runtime import Runtime
    from ..tools.config import config_in_use
    from .up import safe_url

    runtime = Runtime(settings)
    try:
        report: dict[str, Any] = {
            "config": config_in_use(settings.config, required=settings.config_given),
            "state_dir": str(settings.state_dir.resolve()),
            "namespace": runtime.namespace.name,
            "up": processes_of_up(settings),
            "api": api_health(settings),
            "database": _check(lambda: _database(runtime, settings)),
            "redis": _check(lambda: _redis(runtime)),
        }
        served = served_config(settings) if report["up"] is not None else None
        if served is not None and served != report["config"]:
            # The config is `up`'s, whatever this shell's settings would name.
            report["config_of_this_shell"], report["config"] = report["config"], served
        report["database"]["url"] = safe_url(settings.resolved_database_url)
        report["redis"]["url"] = safe_url(runtime.redis_url)
        # Celery's inspect retries a Redis that does not answer without end: ask only one that does.
        report["workers"] = (
            _check(lambda: {"by_queue": _workers(runtime)})
            if report["redis"]["ok"]
            else {"ok": False, "error": "Redis does not answer"}
        )
        workers = report["workers"].get("by_queue", {})
        depths = report["redis"].get("queue_depths", {})
        report["healthy"] = all(
            part["ok"] for part in (report["api"], report["database"], report["redis"])
        ) and all(workers.get(queue) and depths.get(queue) is not None for queue in _queues())
    finally:
        runtime.close()
    return report


def _check(probe: Any) -> dict[str, Any]:
    from ..messaging.redis_clients import redis_problem

    try:
        return {"ok": True, **probe()}
    except Exception as exc:  # a status report names what is down rather than failing
        return {"ok": False, "error": redis_problem(exc)}


def _queues() -> list[str]:
    from ..constants import ALL_QUEUES

    return list(ALL_QUEUES)


def _database(runtime: Any, settings: Settings) -> dict[str, Any]:
    from ..approval import requests as pending
    from ..notify import deliveries
    from ..notify.model import DeliveryStatus
    from .common import missing_database

    # Opened, SQLite would make the file: an empty database that passes for a deployment.
    if (missing := missing_database(settings)) is not None:
        raise FileNotFoundError(f"no deployment here: {missing} does not exist")

    with runtime.store.reading() as conn:
        return {
            "pending_approvals": pending.count_pending(conn, now=runtime.clock()),
            "failed_notifications": deliveries.count(conn, DeliveryStatus.FAILED),
        }


def _redis(runtime: Any) -> dict[str, Any]:
    from ..messaging.redis_clients import redis_client

    client = redis_client(runtime.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        return {"queue_depths": runtime.namespace.queue_depths(client, _queues())}
    finally:
        client.close()


def _workers(runtime: Any) -> dict[str, list[str]]:
    """Worker names per queue, as the workers themselves answer."""
    answers = runtime.celery.control.inspect(timeout=INSPECT_TIMEOUT_S).active_queues() or {}
    by_queue: dict[str, list[str]] = {queue: [] for queue in _queues()}
    for worker, queues in sorted(answers.items()):
        for queue in queues:
            name = str(queue.get("name", "")).removeprefix(runtime.namespace.prefix)
            by_queue.setdefault(name, []).append(worker)
    return by_queue


def api_health(settings: Settings) -> dict[str, Any]:
    import httpx

    url = local_url(settings.api_host, api_port(settings))
    try:
        response = httpx.get(f"{url}/readyz", timeout=3)
    except httpx.HTTPError as exc:
        return {"ok": False, "url": url, "error": f"not answering: {exc}"}
    body = response.json() if response.headers.get("content-type", "").startswith("app") else {}
    ready = response.status_code == 200
    return {"ok": ready, "url": url, **({} if ready else {"error": body.get("error", "")})}


def processes_of_up(settings: Settings) -> dict[str, Any] | None:
    """The processes a running `toolrouter up` started, and whether each is alive; None
    when no `up` runs on this state directory."""
    if not up_holds_state_dir(settings):
        return None
    path = running_file(settings)
    if not path.is_file():
        return None  # a FIFO planted there would hold the read
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        processes = recorded.get("processes", {}) if isinstance(recorded, dict) else None
    # Nesting deeper than the parser recurses raises RecursionError, not ValueError.
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(processes, dict):
        return None  # not what `up` writes (the state directory is not trusted)
    return {
        name: {"pid": pid, "running": _alive(pid)}
        for name, pid in sorted(processes.items())
        if type(pid) is int
    }


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def render(report: dict[str, Any]) -> str:
    def mark(ok: bool) -> str:
        return "ok  " if ok else "DOWN"

    lines = [f"config     {report['config']}"]
    if "config_of_this_shell" in report:
        shell = report["config_of_this_shell"]
        lines.append(f"           (up's; this shell's settings name {shell})")
    lines.append(f"state      {report['state_dir']}")
    api = report["api"]
    lines.append(f"{mark(api['ok'])} API       {api['url']}  {api.get('error', '')}".rstrip())
    for part in ("database", "redis"):
        found = report[part]
        detail = found.get("error", "")
        lines.append(f"{mark(found['ok'])} {part:<9} {found['url']}  {detail}".rstrip())
    up = report["up"]
    if up is None:
        lines.append("     up        not running on this state directory")
    else:
        for name, proc in up.items():
            lines.append(f"{mark(proc['running'])} {name:<13} pid {proc['pid']}")
    workers = report["workers"]
    depths = report["redis"].get("queue_depths", {})
    if not workers["ok"]:
        lines.append(f"DOWN workers   {workers['error']}")
    for queue in _queues():
        consumers = workers.get("by_queue", {}).get(queue, [])
        depth = depths.get(queue, "?")
        state = mark(bool(consumers)) if workers["ok"] else "    "
        if depth is None:
            # Redis fails every wait on such a key until a worker deletes it: down meanwhile.
            state, depth = mark(False), "? (a key of it in Redis is not a list)"
        lines.append(
            f"{state} {queue:<13} {depth} waiting, "
            f"{len(consumers)} worker(s) {', '.join(consumers)}".rstrip()
        )
    if "pending_approvals" in report["database"]:
        lines.append(f"     approvals pending: {report['database']['pending_approvals']}")
    failed = report["database"].get("failed_notifications")
    if failed:
        # Not a health failure: calls and approvals go on without them.
        lines.append(f"     notifications failed: {failed} (GET /v1/notifications?status=failed)")
    # Worker names are what workers answered through Redis, errors quote remote servers.
    return "\n".join(shown_as_text(line) for line in lines)
