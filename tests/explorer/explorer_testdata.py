"""Helpers shared by the explorer tests (imported by module name: tests/ has no packages)."""

from __future__ import annotations


def entry_by(listing: dict, **match) -> dict:
    for entry in listing["entries"]:
        if all(match[k](entry[k]) if callable(match[k]) else entry[k] == match[k] for k in match):
            return entry
    raise AssertionError(f"no entry matching {match}: {[e['relpath'] for e in listing['entries']]}")
