"""Operators (``#/p/<id>/ops``): per op its calls, host and device time, NEFFs and bytes."""

from __future__ import annotations

from .. import payloads
from . import Api, Page

PAGE = Page(name="ops", title="Operators", script="views/ops.js", order=10,
            api=(Api("/ops", lambda session, request: payloads.ops(session)),))
