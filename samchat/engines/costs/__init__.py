"""What a verification forward costs on this machine, in four parts: the curve (curve.py: time of
n new tokens relative to one), its measurement through the Engine interface as decoding meets it
(measurement.py), the tracker that refines it from real steps (tracker.py), and the cost cache
on disk with the memo a loaded model keeps of its measured curves (cache.py).

On a GPU the curve is nearly flat up to ~64 rows; on a CPU it climbs fast, so a draft only pays
when the tokens it is expected to add outweigh its extra cost (samchat.decoding.policy decides).
"""

from __future__ import annotations

from samchat.engines.costs.curve import DEFAULT_CPU, DEFAULT_GPU, FLAT_COST, SIZES, CostCurve
from samchat.engines.costs.measurement import MeasurementCancelled
from samchat.engines.costs.tracker import CostTracker

__all__ = [
    "DEFAULT_CPU",
    "DEFAULT_GPU",
    "FLAT_COST",
    "SIZES",
    "CostCurve",
    "CostTracker",
    "MeasurementCancelled",
]
