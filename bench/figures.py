"""What the benchmarks share: latency percentiles, timing a call, and writing their figures as JSON.

Standard library only: the benchmarks import it into processes whose memory they measure.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of the sorted ``ordered``, nearest rank below; NaN when empty."""
    n = len(ordered)
    return ordered[min(n - 1, int(q * n))] if n else float("nan")


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """p50 and p99 of ``repeat`` calls of ``fn``, in microseconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    times.sort()
    return statistics.median(times), percentile(times, 0.99)


def write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` to ``path`` as indented JSON, making its directory if need be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
