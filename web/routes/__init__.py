"""Lists the routers the app mounts: one module per part of the dashboard, each holding its
pages and their JSON twins."""

from __future__ import annotations

from fastapi import APIRouter

from web.routes import home, hotkeys, submissions

ROUTERS: tuple[APIRouter, ...] = (
    home.router,
    submissions.router,
    hotkeys.router,
)
