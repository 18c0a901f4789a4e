"""The approval inbox (SPEC §12): server-rendered pages for approvers under ``/ui/``."""

from pathlib import Path

from fastapi import APIRouter

from . import edit, request_page, routes

STATIC_DIR = str(Path(__file__).parent / "static")

router = APIRouter()
router.include_router(routes.router)
router.include_router(edit.router)
router.include_router(request_page.router)

__all__ = ["STATIC_DIR", "router"]
