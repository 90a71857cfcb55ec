from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # mutate, oracle, runner
sys.path.insert(0, str(HERE.parent / "analysis"))  # the RMSNorm profile generator
