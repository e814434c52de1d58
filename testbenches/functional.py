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
        self.block, self.order, self.reasons, self._sample = block, [], {}, None

    def point(self, name, bins):
        self.order.append(CoverPoint(f"{self.block}.{name}", xf=lambda v, n=name: v.get(n), bins=list(bins)))

    def cross(self, name, *points, unreachable=None):
        unreachable = unreachable or {}
        self.reasons[name] = {str(b): reason for b, reason in unreachable.items()}
        self.order.append(CoverCross(f"{self.block}.{name}", items=[f"{self.block}.{p}" for p in points],
                                     ign_bins=list(unreachable)))

    def sample(self, **values):
        if self._sample is None:
            def sample(values):
                pass
            # cocotb-coverage samples an item before calling what it wraps, and a cross reads its points'
            # hits of the current call: wrap in reverse so the points (declared first) run first
            for item in reversed(self.order):
                sample = item(sample)
            self._sample = sample
        self._sample(values)

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
