"""Functional coverage of a test with cocotb-coverage: bins, crosses, unreachable bins with their reasons."""
import json

from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db

from testbenches.context import run_dir

__all__ = ["Coverage"]


class Coverage:
    """Functional coverage of one test with cocotb-coverage, under the block's name.

    Declare ``point(name, bins)`` and ``cross(name, *points, unreachable={bin: reason})`` once, then
    ``sample(**values)`` (a value missing or outside a point's bins hits nothing). A cross bin that
    cannot happen is declared ``unreachable`` with the reason (cocotb-coverage ignores it; the report
    prints the reason). ``write()`` saves the hits to ``functional.json`` in the test directory, which
    ``make coverage`` merges per block.
    """

    def __init__(self, block):
        self.block, self.order, self.reasons, self._samplers = block, [], {}, {}

    def point(self, name, bins):
        bins = list(bins)
        if None in bins:
            raise ValueError(f"bins of point {name!r}: None is a missing value, which hits no bin")
        self.order.append((CoverPoint(f"{self.block}.{name}", xf=lambda v, n=name: v.get(n), bins=bins), {name}))

    def cross(self, name, *points, unreachable=None):
        unreachable = unreachable or {}
        self.reasons[name] = {str(b): reason for b, reason in unreachable.items()}
        self.order.append((CoverCross(f"{self.block}.{name}", items=[f"{self.block}.{p}" for p in points],
                                      ign_bins=list(unreachable)), set(points)))

    def sample(self, **values):
        """Sample the points given a value and the crosses all of whose points are: the others would hit
        nothing (a missing value hits no bin, a cross needs a hit of each of its points in the same call),
        so they are not run (most samples name a few of a testbench's points: this is once per event)."""
        names = frozenset(values)
        sample = self._samplers.get(names)
        if sample is None:
            def sample(values):
                pass
            # cocotb-coverage samples an item before calling what it wraps, and a cross reads its points'
            # hits of the current call: wrap in reverse so the points (declared first) run first
            for item, needs in reversed(self.order):
                if needs <= names:
                    sample = item(sample)
            self._samplers[names] = sample
        sample(values)

    def write(self):
        """Hits per bin of every point and cross; unreachable bins with their reasons."""
        items = {}
        for name, item in coverage_db.items():
            if not name.startswith(f"{self.block}."):
                continue
            short = name.split(".", 1)[1]
            items[short] = {"bins": {str(b): n for b, n in item.detailed_coverage.items()},
                            "unreachable": self.reasons.get(short, {})}
        (run_dir() / "functional.json").write_text(json.dumps({"block": self.block, "items": items}, indent=1))
