"""Query parameters of the explorer's API, checked: a bad one is a 400 naming it (BadRequest)."""

from __future__ import annotations

from ..trace.timeunits import TIME_LIMIT_NS
from .views import BadRequest


def number(query, name: str) -> float:
    """A finite time in ns relative to a view's origin, clamped to what int64 ns can hold."""
    try:
        value = float(query[name])
    except KeyError:
        raise BadRequest(f"missing parameter {name}") from None
    except ValueError:
        raise BadRequest(f"{name} must be a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise BadRequest(f"{name} must be finite")
    # Times are int64 nanoseconds relative to the view's origin (itself below TIME_LIMIT_NS): a
    # range reaching past half that limit selects what one ending there does, and origin + t
    # stays inside int64.
    limit = TIME_LIMIT_NS // 2
    return min(max(value, -limit), limit)


def integer(query, name: str, default: int | None = None) -> int:
    """An integer of at most 64 bits; ``default`` when absent (None: required)."""
    text = query.get(name)
    if text is None:
        if default is not None:
            return default
        raise BadRequest(f"missing parameter {name}")
    if len(text) > 20:
        raise BadRequest(f"{name} must be an integer of at most 64 bits")
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None


def lanes(query) -> list[str] | None:
    """``lanes=t1,r1,c3``: the lanes asked for (None: all)."""
    text = query.get("lanes")
    return [part for part in text.split(",") if part] if text else None
