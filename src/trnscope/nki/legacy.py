"""Placeholder: the NKI 0.1 compatibility layer (filled in below)."""
import types
nki_module = types.ModuleType("neuronxcc.nki")
language = types.ModuleType("neuronxcc.nki.language")
isa = types.ModuleType("neuronxcc.nki.isa")
