"""The fields of a Chrome trace event that the reader uses, decoded straight into slots.

Parsing events into dicts is what made big traces slow: a dict per event, a dict per ``args``,
then ``args`` encoded back to JSON for storage. msgspec decodes each event into a small slotted
object instead, skips the fields nobody reads without building them, and hands ``args`` over as
its raw JSON text (``msgspec.Raw``), which is stored as it is. That takes under half the CPU
time of ``orjson.loads`` into dicts, and args are never parsed or re-encoded.

A piece that does not fit this shape (an event that is not an object, a ``ph`` that is not a
string, a number too big for 64 bits) is parsed with orjson into dicts, and the dict path of
kineto_events.py reads it with its full checks and error messages.
"""

from __future__ import annotations

from typing import Union

import msgspec
import orjson

UNSET = msgspec.UNSET
UnsetType = msgspec.UnsetType
_NO_ARGS = msgspec.Raw(b"")


class Event(msgspec.Struct, gc=False):
    """One trace event, typed as Kineto writes it. Fields the JSON lacks stay UNSET (or take the
    default a reader would use). An event with other types (a numeric name, a string timestamp)
    fails validation and sends its piece down the dict path, which accepts or reports it."""

    ph: str
    ts: Union[int, float, UnsetType] = UNSET
    dur: Union[int, float] = 0
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    name: Union[str, None] = None
    cat: Union[str, None] = None
    args: msgspec.Raw = _NO_ARGS
    id: Union[int, str, UnsetType] = UNSET
    bp: Union[str, None] = None
    s: Union[str, UnsetType] = UNSET


_DECODER = msgspec.json.Decoder(list[Event])


def decode_events(document: bytes | bytearray) -> list:
    """The events of a JSON array: :class:`Event` objects, or dicts for a piece that does not fit
    the schema. Malformed JSON raises ``orjson.JSONDecodeError`` (with orjson's position and
    message, which the chunker relies on)."""
    if not document.isascii():
        try:  # msgspec skips the fields it does not read without checking their UTF-8
            bytes(document).decode("utf-8")
        except UnicodeDecodeError as exc:
            text = bytes(document)
            chars = len(text[: exc.start].decode("utf-8"))  # positions are in characters, as orjson's
            raise orjson.JSONDecodeError("invalid UTF-8 (the file is damaged)", text.decode("utf-8", "replace"), chars) from None
    try:
        return _DECODER.decode(document)
    except (msgspec.DecodeError, RecursionError):
        # ValidationError is a DecodeError: the dict path decides what is wrong. msgspec's nesting
        # limit is Python's recursion limit; orjson's (1024 levels) reports too-deep text itself.
        return orjson.loads(document)


def as_dict(event: Event) -> dict:
    """The event as orjson would have parsed it (fields the reader ignores aside)."""
    out = {}
    for field in Event.__struct_fields__:
        value = getattr(event, field)
        if value is UNSET:
            continue
        if field == "args":
            if len(value):
                out["args"] = orjson.loads(bytes(value))
            continue
        out[field] = value
    return out
