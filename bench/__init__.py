"""toolrouter's benchmark against raw Celery on the same Redis (SPEC §15): ``python -m bench``."""
