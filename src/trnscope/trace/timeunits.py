"""Chrome-trace microseconds <-> trnscope's int64 nanoseconds, without losing the nanoseconds.

Chrome JSON stores ``ts``/``dur`` as (possibly fractional) microseconds. Kineto writes three
decimals, i.e. nanoseconds. A float64 holds those exactly only while |ts| < 2**42 us (about 51 days):
epoch-based timestamps (1.7e15 us) are spaced 0.25 us apart as doubles, so their nanosecond digits
are gone as soon as a JSON parser turns them into floats. The reader therefore checks
:func:`float_us_loses_ns` and, when it does, rewrites the text (:func:`rewrite_ts_as_ns`) before
parsing. Everything downstream is integer nanoseconds, which also removes the false overlaps
between a parent and its child that float rounding creates (HTA's ns-resolution workaround).
"""

from __future__ import annotations

import re

import numpy as np

# Below this magnitude every double has a spacing of at most 2**-11 us (< 0.5 ns), so rounding a
# parsed float to the nearest nanosecond recovers the three decimals that were written.
EXACT_FLOAT_US_LIMIT = float(2**42)

# "ts": 1712195495406752.797 -> "ts": 1712195495406752797 (ns). Values written another way
# (exponents, more than three decimals) are left alone and stay microseconds; see parse_ns_values.
_TS_TEXT = re.compile(rb'("ts"\s*:\s*-?\d+)(?:\.(\d{1,3}))?(?![\d.eE])')
_PADDING = {1: b"00", 2: b"0", 3: b""}


def _ts_to_ns(match: re.Match) -> bytes:
    fraction = match.group(2)
    if fraction is None:
        return match.group(1) + b"000"
    return match.group(1) + fraction + _PADDING[len(fraction)]


def rewrite_ts_as_ns(text: bytes) -> bytes:
    """The same JSON with every plain-decimal ``"ts"`` value rewritten as integer nanoseconds."""
    return _TS_TEXT.sub(_ts_to_ns, text)


def us_to_ns(values: list) -> np.ndarray:
    """int64 ns from a list of JSON numbers in microseconds (ints, floats or a mix)."""
    array = np.asarray(values)
    if array.dtype.kind in "iu":
        return array.astype(np.int64) * 1000
    if array.dtype.kind != "f":
        # Strings, None, nested values: the caller finds the offending event and reports it.
        raise TypeError(f"timestamps must be numbers, got values of type {array.dtype}")
    # Splitting off the integer part keeps the product exact: frac * 1000 is tiny, and the
    # integer part times 1000 is done in int64.
    whole = np.floor(array)
    return whole.astype(np.int64) * 1000 + np.rint((array - whole) * 1000).astype(np.int64)


def float_us_loses_ns(values: list) -> bool:
    """True when these parsed floats have fractional microseconds too large to be exact."""
    array = np.asarray(values)
    if array.dtype.kind != "f" or len(array) == 0:
        return False
    if np.abs(array).max() < EXACT_FLOAT_US_LIMIT:
        return False
    return bool(np.any(array != np.floor(array)))


def parse_ns_values(values: list) -> np.ndarray:
    """int64 ns from ``ts`` values after :func:`rewrite_ts_as_ns`: ints are already ns; any float
    is a value the rewrite left alone (exponent, sub-ns digits) and is still microseconds."""
    array = np.asarray(values)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    out = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        out[i] = value if type(value) is int else us_to_ns([value])[0]
    return out


def ns_to_us_text(ns: int) -> bytes:
    """Microseconds as JSON number text with exactly the nanoseconds (no float rounding)."""
    sign = b"-" if ns < 0 else b""
    whole, frac = divmod(abs(int(ns)), 1000)
    if frac == 0:
        return sign + str(whole).encode()
    return sign + f"{whole}.{frac:03d}".encode()
