"""Celery workers: the task that runs a call, handler adapters, and the beat jobs."""
