"""How the commands print numbers: times with units, counts with separators, never 9.45e+03."""

from __future__ import annotations


def duration(ns) -> str:
    if ns is None:
        return "-"
    if ns == 0:
        return "0"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:,.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns:,.0f} ns"


def count(n) -> str:
    if n is None:
        return "-"
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.2f}"
    return f"{int(n):,}"


def human_bytes(n) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"  # pragma: no cover - the loop returns


def percent(fraction, digits: int = 1) -> str:
    """A fraction as a percentage; 0 < x < 0.1% and 99.9% < x < 100% keep enough digits not to
    read as 0% or 100%."""
    if fraction is None:
        return "-"
    value = 100.0 * fraction
    if digits and (0 < abs(value) < 10 ** -digits or 100 - 10 ** -digits < value < 100):
        return f"{value:.{digits + 2}f}%"
    return f"{value:.{digits}f}%"


def ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def signed(value, fmt) -> str:
    if value is None:
        return "-"
    if value == 0:
        return fmt(0)
    return ("+" if value > 0 else "-") + fmt(abs(value))
