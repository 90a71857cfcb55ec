"""Source lines: how trnscope names the line of the user's code that device work came from.

One spelling everywhere, written by the layers that know a line and read by the analyses
(torch-free, so both can import it):

* a line is ``<file>:<line>`` or ``<file>:<line> (<function>)``, the file named as Kineto names a
  Python frame: relative to the ``sys.path`` entry it was imported from (``model.py``,
  ``mypkg/layers.py``), else its base name;
* a framework-op label of a NEFF's instructions that came from a known line is
  ``<op> (<line>)``, e.g. ``aten::mul.Tensor (model.py:12)`` (a compiled graph's members, from the
  FX node's stack trace);
* an NKI instruction's ``nki_source_location`` is a line with its kernel function;
* a Kineto ``python_function`` event (``with_stack=True``) is named ``<file>(<line>): <function>``
  where the line is the function's first line (a frame says which function ran, not which line).

A *library* frame is one of the Python standard library, of a package installed under
``site-packages``/``dist-packages``, or of torch and trnscope themselves (the machinery between
the user's call and the device); the user's line is the innermost frame that is not.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache

from . import caches

_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?: \((?P<function>.*)\))?$")
_LABEL = re.compile(r"^(?P<op>.+?) \((?P<line>.+?:\d+(?: \(.*\))?)\)$")
_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.*)$")
# packages whose frames are machinery between the user's call and the device (besides the
# standard library and anything installed as a package)
_LIBRARIES = frozenset({"torch", "trnscope", "torch_neuronx", "neuronxcc", "nki", "functorch", "numpy",
                        "typing_extensions", "tqdm", "triton"})


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.function})" if self.function else f"{self.file}:{self.line}"

    @property
    def location(self) -> str:
        """``file:line`` without the function (what a compiled graph's label carries)."""
        return f"{self.file}:{self.line}"


def parse(text: str | None) -> SourceLine | None:
    """A line as written by :class:`SourceLine` (``model.py:12`` or ``model.py:12 (forward)``)."""
    m = _LINE.match(text or "")
    return SourceLine(m["file"], int(m["line"]), m["function"] or "") if m else None


def op_label(op: str, line: SourceLine | str | None) -> str:
    """The framework-op label of instructions that came from ``op`` at ``line``."""
    text = line.location if isinstance(line, SourceLine) else line
    return f"{op} ({text})" if text else op


def split_op_label(label: str) -> tuple[str, SourceLine | None]:
    """(op, line) of a framework-op label; the line is None for a label without one."""
    m = _LABEL.match(label or "")
    if m is None:
        return label, None
    line = parse(m["line"])
    return (m["op"], line) if line is not None else (label, None)


def parse_frame(name: str) -> SourceLine | None:
    """A Kineto ``python_function`` event's name (``model.py(36): forward``); None for built-ins."""
    m = _FRAME.match(name or "")
    return SourceLine(m["file"], int(m["line"]), m["function"]) if m else None


def is_library(file: str) -> bool:
    """Whether a file named as :func:`display_path` names it belongs to a library (see above)."""
    path = file.replace("\\", "/")
    if "site-packages/" in path or "dist-packages/" in path or path.startswith("<"):
        return True
    top = path.split("/", 1)[0]
    top = top[:-3] if top.endswith(".py") else top
    return top in _LIBRARIES or top in sys.stdlib_module_names


@lru_cache(maxsize=4096)
def display_path(path: str) -> str:
    """``path`` relative to the longest ``sys.path`` entry holding it (as Kineto names frames),
    else its base name; names that are not paths (``<string>``) as they are."""
    if path.startswith("<"):
        return path
    full = os.path.abspath(path)
    best = ""
    for entry in sys.path:
        root = os.path.abspath(entry or os.getcwd())
        if full.startswith(root.rstrip(os.sep) + os.sep) and len(root) > len(best):
            best = root
    return os.path.relpath(full, best).replace(os.sep, "/") if best else os.path.basename(full)


caches.register("sourceline: display paths", display_path.cache_clear)


def user_line(frame) -> SourceLine | None:
    """The innermost frame of the user's code from ``frame`` outwards (None when every frame is a
    library's, as on autograd's backward thread)."""
    while frame is not None:
        code = frame.f_code
        file = display_path(code.co_filename)
        # an installed package's frames are named from its sys.path entry (site-packages/...)
        # by display_path: the absolute path says it is installed
        if not is_library(file) and not is_library(code.co_filename):
            return SourceLine(file, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None

