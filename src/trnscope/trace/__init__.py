"""trnscope.trace: the columnar trace model and its file formats. Never imports torch.

    from trnscope.trace import read_kineto
    trace = read_kineto("rank0.pt.trace.json.gz")
    rows = trace.window(t0, t1)                   # slices overlapping a time range
    view = trace.lod(t0, t1, buckets=1600)        # what to draw at 1600 px
"""

from .builder import TraceBuilder
from .errors import TraceFormatError
from .kineto import dumps_kineto, parse_kineto, read_kineto, write_kineto
from .model import LodResult, Trace
from .parquet import is_parquet_trace, load_parquet, save_parquet
from .tracks import Track, TrackKind
from .files import open_trace

__all__ = [
    "LodResult",
    "Trace",
    "TraceBuilder",
    "TraceFormatError",
    "Track",
    "TrackKind",
    "dumps_kineto",
    "is_parquet_trace",
    "load_parquet",
    "open_trace",
    "parse_kineto",
    "read_kineto",
    "save_parquet",
    "write_kineto",
]
