"""The cost cache on disk (`costs/<digest>.json` under the model cache) and the memo of
measured curves a loaded model keeps: every engine made from the same weights shares one
measurement, read from disk or measured once."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

from samchat.engines.costs.curve import CostCurve, LongParts
from samchat.engines.kernels import KernelPlan, plan_from

log = logging.getLogger(__name__)

# Bumped when the verification forward or its measurement changes: cached curves are re-measured.
CURVE_VERSION = 5
# A cached curve above this at 4 inputs was measured under heavy load (batching 4 rows costs
# no more than 4 one-row forwards and the switches of batch shape around them): measure again.
_PLAUSIBLE_REL4 = 5.0


class CurveFile(TypedDict):
    """A cache file's JSON: the curve, its longer ones, its kernel plan and what was measured."""

    version: int
    context: int
    relative_cost: dict[str, float]
    long: NotRequired[LongParts]
    kernels: NotRequired[dict[str, str]]
    about: NotRequired[dict[str, str]]


def load_cached(cache_file: Path | None) -> CostCurve | None:
    """The curve cached in cache_file; None if there is none, or it is unreadable or
    degenerate (to be measured again)."""
    try:
        if cache_file is None:
            return None
        data = json.loads(cache_file.read_text())
        # "exact": measured in the withdrawn exact mode (padded attention), not these costs.
        if data.get("version") == CURVE_VERSION and not data.get("exact"):
            kernels = plan_from(data["kernels"]) if "kernels" in data else None
            points = {int(k): float(v) for k, v in data["relative_cost"].items()}
            curve = CostCurve(points, kernels=kernels, context=int(data.get("context", 256)))
            last, part = curve, data
            while "long" in part:
                part = part["long"]
                long_points = {int(k): float(v) for k, v in part["relative_cost"].items()}
                last.long = CostCurve(long_points, context=int(part["context"]))
                last = last.long
            if min(curve.ys) > 0 and curve.rel(4) <= _PLAUSIBLE_REL4:
                return curve
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, ArithmeticError):
        pass
    return None


def load_or_measure(
    measure: Callable[[], CostCurve],
    cache_file: Path | None,
    progress: Callable[[str], None] | None = None,
    about: dict[str, str] | None = None,
) -> CostCurve:
    """The curve cached in cache_file, measured once if missing or unreadable (every time
    without a file). `about` (what was measured: model, dtype, CPU...) is saved with it for
    `samchat doctor`."""
    cached = load_cached(cache_file)
    if cached is not None:
        return cached
    message = "measuring this machine's verification cost (once per model)…"
    if progress is not None:
        progress(message)
    else:  # samchat/cli.py shows it on stderr
        log.info(message)
    curve = measure()
    if cache_file is not None:
        save_curve(curve, cache_file, about)
    return curve


def save_curve(curve: CostCurve, cache_file: Path, about: dict[str, str] | None = None) -> None:
    """Keep a measured curve in the cache (load_cached reads it back)."""
    try:
        cache_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        payload: CurveFile = {
            "version": CURVE_VERSION,
            "context": curve.context,
            "relative_cost": curve.to_dict(),
        }
        if curve.long is not None:
            payload["long"] = curve.long.long_parts()
        if curve.kernels is not None:
            payload["kernels"] = curve.kernels.to_dict()
        if about:
            payload["about"] = about
        # Written whole, then renamed: another process reading it meanwhile sees no half file.
        tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload, indent=1))
        os.replace(tmp, cache_file)
    except OSError as exc:  # a read-only cache only costs a re-measure next time
        log.warning("could not save the cost curve to %s: %s", cache_file, exc)


def cached_kernel_plans(costs_dir: Path) -> list[tuple[dict[str, str], KernelPlan]]:
    """The kernel plans measured on this machine so far (what each was measured for, the
    plan), from the cost cache: `samchat doctor` shows them."""
    found: list[tuple[dict[str, str], KernelPlan]] = []
    for path in sorted(costs_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
            plan = plan_from(data["kernels"]) if data.get("version") == CURVE_VERSION else None
            about = {str(k): str(v) for k, v in dict(data.get("about", {})).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if plan is not None:
            found.append((about, plan))
    return found


class CurveMemo:
    """Measured curves by what they were measured on (a digest of the model, dtype, device,
    CPU and library versions), in memory and in the cost cache. A loaded model holds one
    (LoadedModel.curves): every engine made from its weights shares one measurement, and one
    measurement runs at a time (two would disturb each other)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.curves: dict[str, CostCurve] = {}
        self._kept: set[Path] = set()  # cache files keep() has tried

    def known(self, digest: str, cache_file: Path | None) -> CostCurve | None:
        """The curve for digest if this process or the cache has it; never measures."""
        with self.lock:
            curve = self.curves.get(digest) or load_cached(cache_file)
            if curve is not None:
                self.curves[digest] = curve
            return curve

    def get(
        self,
        digest: str,
        cache_file: Path | None,
        measure: Callable[[], CostCurve],
        about: dict[str, str] | None = None,
    ) -> CostCurve:
        """The known curve (kept in `cache_file` too if that lacks it), else measured once."""
        with self.lock:
            curve = self.curves.get(digest)
            if curve is None:
                curve = load_or_measure(measure, cache_file, about=about)
                self.curves[digest] = curve
            else:
                self.keep(curve, cache_file, about)
            return curve

    def keep(
        self, curve: CostCurve, cache_file: Path | None, about: dict[str, str] | None = None
    ) -> None:
        """A curve this memo knows (measured, or read from another cache) goes into a cache
        that lacks a readable one; tried once per file, however often replies ask."""
        if cache_file is None or cache_file in self._kept:
            return
        self._kept.add(cache_file)
        if load_cached(cache_file) is None:
            save_curve(curve, cache_file, about)

    def clear(self) -> None:
        with self.lock:
            self.curves.clear()
