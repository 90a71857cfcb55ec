"""NKI element types: strings (``nl.float32 == "float32"``) that also compare equal to the NumPy and
torch dtypes they stand for, mapped onto the device's :class:`trnscope.isa.DType`."""

from __future__ import annotations

import numpy as np

from ..isa import DType
from .errors import NkiUnsupportedError


class NkiDType(str):
    """One NKI dtype. ``itemsize`` in bytes; ``device`` the ISA dtype (None: no device equivalent)."""

    itemsize: int  # set on each of DTYPES (a plain attribute: read on every access pattern)

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return str.__eq__(self, _ALIASES.get(other, other))
        try:
            return str.__eq__(self, str(as_nki_dtype(other)))
        except (TypeError, ValueError, NkiUnsupportedError):
            return False

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    @property
    def device(self) -> DType:
        dt = _DEVICE.get(str(self))
        if dt is None:
            raise NkiUnsupportedError(
                f"dtype {self} has no NeuronCore-v2/v3 equivalent in trnscope (it is a NeuronCore-v4 or packed "
                f"type); use float32, bfloat16, float16, float8_e4m3 or an integer type")
        return dt


    @property
    def np(self) -> np.dtype:
        return self.device.np

    @property
    def is_float(self) -> bool:
        return str(self).startswith(("float", "bfloat", "tfloat"))

    def __repr__(self) -> str:
        return f"nl.{str.__str__(self)}"


_NAMES = ("bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
          "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e5m2_x4",
          "float8_e4m3fn_x4", "float4_e2m1fn_x4")
_ITEMSIZE = {"bool_": 1, "int8": 1, "int16": 2, "int32": 4, "uint8": 1, "uint16": 2, "uint32": 4, "float16": 2,
             "float32": 4, "bfloat16": 2, "tfloat32": 4, "float8_e4m3": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
             "float8_e8m0fnu": 1, "float8_e5m2_x4": 4, "float8_e4m3fn_x4": 4, "float4_e2m1fn_x4": 2}
# tfloat32 is stored as fp32 (TensorE reads it at bf16 rate); float8_e4m3 is the device's e4m3.
# uint16/uint32 have no device type of their own: stored in the signed type of the same width.
_DEVICE = {"bool_": DType.bool_, "int8": DType.int8, "int16": DType.int16, "int32": DType.int32,
           "uint8": DType.uint8, "uint16": DType.int16, "uint32": DType.int32, "float16": DType.float16,
           "float32": DType.float32, "bfloat16": DType.bfloat16, "tfloat32": DType.float32,
           "float8_e4m3": DType.float8_e4m3, "float8_e4m3fn": DType.float8_e4m3}
_ALIASES = {"bool": "bool_", "float": "float32", "half": "float16"}

DTYPES: dict[str, NkiDType] = {n: NkiDType(n) for n in _NAMES}
for _n, _dt in DTYPES.items():
    _dt.itemsize = _ITEMSIZE[_n]  # a plain attribute: read on every access pattern
_FROM_DEVICE = {DType.bool_: "bool_", DType.int8: "int8", DType.int16: "int16", DType.int32: "int32",
                DType.uint8: "uint8", DType.float16: "float16", DType.float32: "float32",
                DType.bfloat16: "bfloat16", DType.float8_e4m3: "float8_e4m3"}


def as_nki_dtype(value) -> NkiDType:
    """An NKI dtype from an NKI dtype, a name, a NumPy dtype, a torch dtype or a device DType."""
    if isinstance(value, NkiDType):
        return value
    if isinstance(value, DType):
        return DTYPES[_FROM_DEVICE[value]]
    if isinstance(value, str):
        name = _ALIASES.get(value, value).replace("torch.", "")
        if name in DTYPES:
            return DTYPES[name]
        raise TypeError(f"unknown NKI dtype {value!r} (use nl.float32, nl.bfloat16, ...)")
    mod = type(value).__module__
    if mod.startswith("torch"):
        name = str(value).replace("torch.", "")
        name = {"bool": "bool_", "float8_e4m3fn": "float8_e4m3"}.get(name, name)
        if name in DTYPES:
            return DTYPES[name]
        raise NkiUnsupportedError(f"torch dtype {value} has no NKI equivalent")
    try:
        d = np.dtype(value)
    except TypeError:
        raise TypeError(f"{value!r} is not a dtype") from None
    if d == np.bool_:
        return DTYPES["bool_"]
    return DTYPES[_FROM_DEVICE[DType.parse(d)]] if d.name not in ("uint16", "uint32") else DTYPES[d.name]
