"""Every file format trnscope writes and reads, defined once (docs/file-formats.md is the spec).

The writer (``trnscope.profiling``, ``trnscope.isa.neff``) and every reader (``trnscope.analysis``,
the explorer, ``trnscope retime``, ``trnscope inspect``) go through these modules, so a format's
magic, header layout, version, schema and file names exist in one place. Nothing here imports torch
or any other part of trnscope (only the standard library, NumPy, orjson and pyarrow), so the
torch-free readers can use it and the lowest layers can too.

* :mod:`.neff` - the NEFF container's 1024-byte header (the tarball inside is ``isa.neff``'s:
  it encodes instructions, which belong to the ISA layer);
* :mod:`.ntff` - the NTFF instruction trace: fixed head, JSON header (and the shape readers rely
  on), Parquet tables and their columns; encoding from columns and reading back;
* :mod:`.profile` - the profile directory: file names and kinds, the manifest, the host-sample
  documents' schemas.
"""

from .errors import FormatError

__all__ = ["FormatError"]
