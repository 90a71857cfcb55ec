"""The kernel library: importing it registers every lowering.

Every module of this package is imported (each registers its lowerings with ``@lowering``), so a
new kernel module needs no list: ``common`` holds shared helpers and registers nothing.
"""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
