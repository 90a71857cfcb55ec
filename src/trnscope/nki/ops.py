"""The operator objects of ``nki.language`` (``nl.add``, ``nl.exp``, ...): callables that also name the
ALU operation or ScalarE activation function an ISA call uses (``op=nl.add``)."""

from __future__ import annotations

from ..isa import Act, Alu


class NkiOperator:
    """``nl.<name>``: calling it is the nki.language function; ``alu``/``act`` are what ISA calls use."""

    __slots__ = ("name", "alu", "act", "fn", "doc")

    def __init__(self, name: str, alu: Alu | None = None, act: Act | None = None, fn=None, doc: str = "") -> None:
        self.name = name
        self.alu = alu
        self.act = act
        self.fn = fn
        self.doc = doc

    def __call__(self, *args, **kwargs):
        if self.fn is None:
            from .errors import NkiUnsupportedError

            raise NkiUnsupportedError(f"nl.{self.name} can only be passed as an operator (op=nl.{self.name}), "
                                      f"not called")
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __reduce__(self):
        return (_operator, (self.name,))


_REGISTRY: dict[str, NkiOperator] = {}


def _operator(name: str) -> NkiOperator:
    return _REGISTRY[name]


def operator(name: str, alu: Alu | None = None, act: Act | None = None) -> NkiOperator:
    op = _REGISTRY.get(name)
    if op is None:
        op = _REGISTRY[name] = NkiOperator(name, alu, act)
    return op
