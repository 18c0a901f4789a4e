"""The approval inbox (SPEC §12): server-rendered pages for approvers under ``/ui/``."""

from pathlib import Path

from .routes import router

STATIC_DIR = str(Path(__file__).parent / "static")

__all__ = ["STATIC_DIR", "router"]
