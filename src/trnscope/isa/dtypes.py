"""Element types the engines and DMA understand, with their NumPy (ml_dtypes) equivalents."""

from __future__ import annotations

from enum import Enum

import ml_dtypes
import numpy as np


_NpDType = np.dtype  # (inside DType, ``np`` is its property)

class DType(str, Enum):
    __hash__ = str.__hash__  # C-level hash for hot-path memo keys

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float8_e4m3 = "float8_e4m3"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    bool_ = "bool"

    @property
    def np(self) -> np.dtype:
        return _NP[self]

    @property
    def itemsize(self) -> int:
        return _NP[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.bfloat16, DType.float16, DType.float8_e4m3)

    @property
    def is_half(self) -> bool:
        """16-bit or narrower floats: the types NC-v3's VectorE performance modes apply to."""
        return self in (DType.bfloat16, DType.float16, DType.float8_e4m3)

    @classmethod
    def parse(cls, value: "DType | str | _NpDType") -> "DType":
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            s = value.replace("torch.", "")
            aliases = {"bool": cls.bool_, "float": cls.float32, "half": cls.float16, "long": cls.int64,
                       "int": cls.int32, "float8_e4m3fn": cls.float8_e4m3}
            return aliases.get(s) or cls(s)
        d = np.dtype(value)
        for k, v in _NP.items():
            if v == d:
                return k
        raise ValueError(f"no device dtype for NumPy dtype {d}")


_NP: dict[DType, np.dtype] = {
    DType.float32: np.dtype(np.float32),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.float16: np.dtype(np.float16),
    DType.float8_e4m3: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.int16: np.dtype(np.int16),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.bool_: np.dtype(np.bool_),
}
