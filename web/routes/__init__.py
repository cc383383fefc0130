"""Lists the routers the app mounts: one module per part of the dashboard, each holding its
pages and their JSON twins."""

from __future__ import annotations

from fastapi import APIRouter

from web.routes import (
    arenas,
    checkpoints,
    events,
    home,
    hotkeys,
    settlements,
    submissions,
    tiles,
)

ROUTERS: tuple[APIRouter, ...] = (
    home.router,
    arenas.router,
    submissions.router,
    hotkeys.router,
    settlements.router,
    checkpoints.router,
    tiles.router,
    events.router,
)
