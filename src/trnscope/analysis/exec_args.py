"""The args the analyses read from device executions and runtime calls, decoded by key.

A device execution's args hold a dozen keys the analyses use and often many they do not (CUDA
kernels: grid, block, registers, occupancy, ...). Decoding them into dicts costs a Python dict per
event; here the JSON texts of all rows are decoded in one msgspec call into slotted structs that
keep only the keys listed below and skip the rest in C. Values of an unexpected type (a trace
writing a number as a string, say) make that call fail; then the rows are decoded one by one with
the same struct and, for a row that still does not fit, with orjson, keeping the listed keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import orjson

Number = int | float


class ExecArgs(msgspec.Struct, frozen=True, gc=False):
    """Keys of a device execution (Kineto kernel/copy, trnscope NEFF execution)."""

    correlation: int | str | None = None
    stream: int | str | None = None
    device: int | str | None = None
    op: str | None = None
    framework_op: str | None = None
    neff_id: int | str | None = None
    neff_name: str | None = None
    ntff: str | None = None
    instructions: Number | None = None
    hbm_read_bytes: Number | None = None
    hbm_write_bytes: Number | None = None
    bytes: Number | None = None
    mfu_estimated_percent: Number | None = None
    mbu_estimated_percent: Number | None = None
    bottleneck: str | None = None
    seq: int | None = None
    nc: int | None = None
    source: str | None = None  # the user's line that dispatched it (trnscope, with_stack=True)
    backward_source: str | None = None  # autograd's thread: the user's line that called backward()


class LaunchArgs(msgspec.Struct, frozen=True, gc=False):
    """Keys of a runtime call (cudaLaunchKernel, nrt_execute, ...)."""

    correlation: int | str | None = None


_EMPTY = b"{}"


def decode_args(texts: Sequence[bytes], struct: type[msgspec.Struct] = ExecArgs) -> list:
    """One struct per JSON text (b"" for a row without args)."""
    if not texts:
        return []
    joined = b"[" + b",".join(t or _EMPTY for t in texts) + b"]"
    try:
        return msgspec.json.decode(joined, type=list[struct])  # type: ignore[valid-type]  # a class given at run time
    except (msgspec.ValidationError, msgspec.DecodeError):
        return [_decode_one(t, struct) for t in texts]


def _decode_one(text: bytes, struct):
    try:
        return msgspec.json.decode(text or _EMPTY, type=struct)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    try:
        raw = orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return struct()
    if not isinstance(raw, dict):
        return struct()
    kept = {}
    for name in struct.__struct_fields__:
        if name in raw:
            try:  # a value of the wrong kind is dropped, the row's other keys kept
                msgspec.convert({name: raw[name]}, struct, strict=False)
                kept[name] = raw[name]
            except msgspec.ValidationError:
                pass
    return msgspec.convert(kept, struct, strict=False)


def number(value) -> float:
    """A numeric arg as a float (0 when absent)."""
    return float(value) if isinstance(value, (int, float)) else 0.0
