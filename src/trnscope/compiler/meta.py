"""What a lowering knows about a tensor: shape, strides, dtype and where its elements live in HBM."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..isa import DType, Program


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: DType
    offset: int = 0  # storage offset in elements

    @staticmethod
    def contiguous(shape, dtype) -> "TensorMeta":
        shape = tuple(int(s) for s in shape)
        stride = []
        acc = 1
        for s in reversed(shape):
            stride.append(acc)
            acc *= max(s, 1)
        return TensorMeta(shape, tuple(reversed(stride)), DType.parse(dtype), 0)

    @property
    def numel(self) -> int:
        return prod(self.shape) if self.shape else 1

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def span(self) -> int:
        """Elements of storage from ``offset`` that the view can touch (the HBM tensor to bind)."""
        if self.numel == 0:
            return 0
        return 1 + sum(st * (sz - 1) for st, sz in zip(self.stride, self.shape) if st > 0)

    def is_contiguous(self) -> bool:
        return self == TensorMeta.contiguous(self.shape, self.dtype)._replace_offset(self.offset)

    def _replace_offset(self, offset: int) -> "TensorMeta":
        return TensorMeta(self.shape, self.stride, self.dtype, offset)

    def key(self) -> tuple:
        return (self.shape, self.stride, self.dtype.value)

    def bind(self, program: Program, name: str, kind: str) -> int:
        """Declare the HBM tensor this view reads or writes: its storage span, 1-D."""
        return program.tensor(name, (max(1, self.span()),), self.dtype, kind)


def broadcast_strides(meta: TensorMeta, out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of ``meta`` read at every index of ``out_shape`` (0 along broadcast dims)."""
    nd = len(out_shape)
    pad = nd - meta.ndim
    strides = []
    for d in range(nd):
        if d < pad:
            strides.append(0)
            continue
        size, st = meta.shape[d - pad], meta.stride[d - pad]
        strides.append(0 if size == 1 and out_shape[d] != 1 else st)
    return tuple(strides)
