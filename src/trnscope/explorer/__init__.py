"""trnscope.explorer: the browser explorer for profiles and Kineto traces (torch-free).

    from trnscope.explorer import create_app          # an ASGI app (Starlette)
    app = create_app(["profile_output"])               # serve everything under a folder

``trnscope view DIR...`` runs it on uvicorn; docs/explorer.md describes the API and the views.
"""

from .app import create_app
from .server import plan, serve

__all__ = ["create_app", "plan", "serve"]
