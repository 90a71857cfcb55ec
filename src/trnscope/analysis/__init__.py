"""trnscope.analysis: what a profile says, as data (torch-free; numpy over the trace model).

    from trnscope.analysis import load_profile, ProfileAnalysis, diff_profiles

    analysis = ProfileAnalysis(load_profile("profile_output/host_pid_1/20260101_120000_000000"))
    analysis.ops.ops[:5]             # operator table rows (CPU self/total, device time, dispatches, ...)
    analysis.device                  # device summary: device time, engine active %, MFU, MBU, DMA
    analysis.idle                    # idle gaps between device executions and their cause
    analysis.recommendations         # 2-4 ranked findings
    diff_profiles(base, test)        # two profiles aligned by op name
"""

from .device import DeviceSummary, device_summary
from .diff import diff_ops, diff_profiles, diff_summaries
from .gaps import IdleAnalysis, idle_gaps
from .lanes import Role, activity_extent, lane_infos, track_role
from .ops import OpTable, op_table
from .profile import KINETO, NEURON, PARQUET, Profile, ProfileError, detect_kind, load_profile
from .recommend import Recommendation, recommend
from .summary import ProfileAnalysis
from .trace_cache import TraceCache

__all__ = [
    "DeviceSummary", "IdleAnalysis", "KINETO", "NEURON", "OpTable", "PARQUET", "Profile", "ProfileAnalysis",
    "ProfileError", "Recommendation", "Role", "TraceCache", "activity_extent", "detect_kind", "device_summary", "diff_ops",
    "diff_profiles", "diff_summaries", "idle_gaps", "lane_infos", "load_profile", "op_table", "recommend",
    "track_role",
]
