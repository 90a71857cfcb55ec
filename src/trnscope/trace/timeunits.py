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
from typing import Any

import numpy as np

# Below this magnitude every double has a spacing of at most 2**-11 us (< 0.5 ns), so rounding a
# parsed float to the nearest nanosecond recovers the three decimals that were written.
EXACT_FLOAT_US_LIMIT = float(2**42)

# trnscope keeps times as int64 nanoseconds and adds durations to timestamps, so every time read
# must satisfy |t| < 2**62 ns (about 146 years: epoch microseconds are 1.7e15 us = 1.7e18 ns) and
# a timestamp plus a duration still fits in int64. Larger values are reported, never wrapped.
TIME_LIMIT_NS = 2**62
TIME_LIMIT_US = TIME_LIMIT_NS // 1000

# "ts": 1712195495406752.797 -> "ts": 1712195495406752797 (ns). Values written another way
# (exponents, more than three decimals) are left alone and stay microseconds; see parse_ns_values.
_TS_TEXT = re.compile(rb'("ts"\s*:\s*)(-?)(\d+)(?:\.(\d{1,3}))?(?![\d.eE])')
_TS_DUR_TEXT = re.compile(rb'("(?:ts|dur)"\s*:\s*)(-?)(\d+)(?:\.(\d{1,3}))?(?![\d.eE])')
_PADDING = {1: b"00", 2: b"0", 3: b""}


def _ts_to_ns(match: re.Match) -> bytes:
    key, sign, whole, fraction = match.groups()
    if whole[:1] != b"0":  # the common case: the digits spliced (a callback per event: keep it cheap)
        return key + sign + whole + (fraction + _PADDING[len(fraction)] if fraction else b"000")
    if len(whole) > 1:
        return match.group(0)  # a leading zero is not JSON: left for the parser to report
    # 0.5 -> 500 and 0 -> 0 (splicing gave 0500 and 0000, leading zeros, which JSON forbids)
    ns = int(fraction + _PADDING[len(fraction)]) if fraction else 0
    return key + (sign if ns else b"") + str(ns).encode()


def rewrite_ts_as_ns(text: bytes) -> bytes:
    """The same JSON with every plain-decimal ``"ts"`` value rewritten as integer nanoseconds."""
    return _TS_TEXT.sub(_ts_to_ns, text)


def rewrite_ts_and_dur_as_ns(text: bytes) -> bytes:
    """:func:`rewrite_ts_as_ns` for ``"dur"`` values too: a duration of 2**42 us or more (a begin
    event left open runs to the end of an epoch-stamped trace) loses its nanoseconds as a float
    just as a timestamp does. Only traces that hold one pay for the second key."""
    return _TS_DUR_TEXT.sub(_ts_to_ns, text)


class TimeOutOfRange(ValueError):
    """A time too large for int64 nanoseconds (see TIME_LIMIT_NS); the reader names the event."""


def us_to_ns(values: list | np.ndarray) -> np.ndarray:
    """int64 ns from a list of JSON numbers in microseconds (ints, floats or a mix)."""
    array = as_times(values)
    bad = _out_of_range(array, TIME_LIMIT_US)
    if bad is not None:
        raise TimeOutOfRange(f"a time of {bad} us is outside +-{TIME_LIMIT_US} us")
    if array.dtype.kind in "iu":
        return array.astype(np.int64) * 1000
    # Splitting off the integer part keeps the product exact: frac * 1000 is tiny, and the
    # integer part times 1000 is done in int64.
    whole = np.floor(array)
    return whole.astype(np.int64) * 1000 + np.rint((array - whole) * 1000).astype(np.int64)


def float_us_loses_ns(values: list | np.ndarray) -> bool:
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
    array = as_times(values)
    if array.dtype.kind in "iu":
        bad = _out_of_range(array, TIME_LIMIT_NS)
        if bad is not None:
            raise TimeOutOfRange(f"a time of {int(bad) / 1000} us is outside +-{TIME_LIMIT_US} us")
        return array.astype(np.int64)
    out = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        if type(value) is int:
            if abs(value) >= TIME_LIMIT_NS:
                raise TimeOutOfRange(f"a time of {value / 1000} us is outside +-{TIME_LIMIT_US} us")
            out[i] = value
        else:
            out[i] = us_to_ns([value])[0]
    return out


def as_times(values: list | np.ndarray) -> np.ndarray:
    """A 1-D array of ``values``, or TypeError: booleans, strings, None and nested values are not
    times (numpy would read ``true`` as 1 and ``[1]`` as a 2-D array). Integers past 64 bits give
    an object array, which the range checks then reject."""
    if isinstance(values, np.ndarray):
        array = values
    else:
        if bool in set(map(type, values)):
            raise TypeError("a time is a JSON boolean")
        array = np.asarray(values)
    if array.ndim != 1 or array.dtype.kind not in "iufO":
        raise TypeError(f"times must be numbers, got values of type {array.dtype}")
    if array.dtype.kind == "O" and not all(type(v) in (int, float) for v in array.tolist()):
        raise TypeError("times must be numbers")
    return array


def _out_of_range(array: np.ndarray, limit: int) -> Any:
    """The first value with |value| >= limit (or NaN), or None."""
    bad = ~((array > -limit) & (array < limit))  # not abs(): abs(-2**63) is still negative in int64
    return array[np.flatnonzero(bad)[0]] if bad.any() else None


def ns_to_us_text(ns: int) -> bytes:
    """Microseconds as JSON number text with exactly the nanoseconds (no float rounding)."""
    sign = b"-" if ns < 0 else b""
    whole, frac = divmod(abs(int(ns)), 1000)
    if frac == 0:
        return sign + str(whole).encode()
    return sign + f"{whole}.{frac:03d}".encode()
