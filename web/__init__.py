"""The read-only web dashboard, JSON API and C2SP tlog-tiles endpoints (``arena-ledger serve``).

A second shell beside ``cli/``: it imports the services and renders what they answer; it
never appends. FastAPI, Starlette, uvicorn and Jinja2 are imported only here.
"""
