"""The Celery app: ``celery -A workers.app worker -Q tools.high``."""

from __future__ import annotations

from celery import Celery

from router.files import create_private_files
from router.messaging.celery_app import resolve_redis_url
from router.messaging.namespace import Namespace
from router.settings import settings_or_exit

from .celeryconfig import worker_settings
from .flower_guard import make_flower_read_only

# Every Celery process (workers, beat, Flower) loads this module before it writes a file.
create_private_files()
settings = settings_or_exit()
app = Celery("toolrouter", include=["workers.tasks", "workers.notifications", "approvals.tasks"])
app.conf.update(worker_settings(settings, resolve_redis_url(settings), Namespace.of(settings)))
# Under `celery -A workers.app flower`: Flower may watch, never act.
make_flower_read_only()
