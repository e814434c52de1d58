"""Summarise ``build/sim_speed.csv`` (written by every cocotb run): simulated cycles per second."""
import collections
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(path=ROOT / "build" / "sim_speed.csv"):
    if not Path(path).exists():
        sys.exit("speed: no runs recorded yet: run `make test` first")
    totals = collections.defaultdict(lambda: [0, 0.0, 0])
    for block, _tag, _case, cycles, seconds in csv.reader(open(path)):
        total = totals[block]
        total[0] += int(cycles)
        total[1] += float(seconds)
        total[2] += 1
    print(f"{'block':<18}{'runs':>6}{'cycles':>12}{'seconds':>10}{'cycles/s':>10}")
    for block, (cycles, seconds, runs) in sorted(totals.items()):
        print(f"{block:<18}{runs:>6}{cycles:>12}{seconds:>10.1f}{cycles / max(seconds, 1e-9):>10.0f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
