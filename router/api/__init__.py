"""The HTTP API (FastAPI): ``create_app`` builds it around a ``Runtime``."""

from .app import create_app

__all__ = ["create_app"]
