"""Profiles (``#/``): a card per profile and trace under the served folders; tick two to compare."""

from __future__ import annotations

from .. import payloads
from . import ENTRY, GLOBAL, Api, Page

PAGE = Page(
    name="profiles", title="Profiles", script="views/profiles.js", scope=GLOBAL, order=0, home=True,
    api=(Api("/card", lambda session, request: payloads.card(session), scope=ENTRY),),
)
