"""The Python one warm op runs on ``neuron``: which of trnscope's modules it enters, how often.

``sys.setprofile`` over one warm ``a + b`` (32x32 fp32, its plan already made): every call of a
trnscope Python function is a stop; a module is *entered* when a function of it is called from
another module; a *climb back* is a call from ``compiler/`` or ``runtime/`` into ``device/``. On
the C++ path a planned op runs no trnscope Python at all (0 stops); ``TRNSCOPE_CPP=0`` shows the
Python path. ``-v`` lists every stop.

    .venv/bin/python benchmarks/bench_eager_path.py [-v]
"""

from __future__ import annotations

import collections
import os
import sys
import warnings


def main() -> None:
    warnings.simplefilter("ignore")
    import torch

    import trnscope
    from trnscope.device import _core

    root = os.path.dirname(trnscope.__file__) + os.sep
    a = torch.randn(32, 32, device="neuron")
    b = torch.randn(32, 32, device="neuron")
    for _ in range(3):
        a + b
    torch.neuron.synchronize()
    calls = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            back = frame.f_back.f_code.co_filename if frame.f_back else ""
            calls.append((frame.f_code.co_filename[len(root):], frame.f_code.co_name,
                          back[len(root):] if back.startswith(root) else None))

    sys.setprofile(prof)
    a + b
    sys.setprofile(None)
    stops = collections.Counter(f for f, _, _ in calls)
    entries = collections.Counter(f for f, _, caller in calls if caller != f)
    climbs = sum(1 for f, _, caller in calls
                 if caller and f.startswith("device/") and caller.startswith(("compiler/", "runtime/")))
    print(f"path: {'C++ core' if _core.CORE is not None else 'Python'}")
    print(f"one warm a + b: {len(calls)} stops in {len(stops)} modules, {sum(entries.values())} module entries, "
          f"{climbs} climbs back into device/")
    for f, n in entries.most_common():
        print(f"  {f:36s} entered {n:2d}x, {stops[f]:2d} stops")
    if "-v" in sys.argv:
        for f, name, caller in calls:
            print(f"    {caller} -> {f}:{name}")


if __name__ == "__main__":
    main()
