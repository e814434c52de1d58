"""Summarise ``build/sim_speed.csv`` (written by every cocotb run): simulated cycles per second.

    python -m tools.speed [CSV]
"""
import collections
import csv
from pathlib import Path

from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "build" / "sim_speed.csv"


def totals(path):
    """``{block: [cycles, seconds, runs]}`` of the runs recorded in ``path``."""
    out = collections.defaultdict(lambda: [0, 0.0, 0])
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (UnicodeDecodeError, csv.Error) as error:
        raise ValueError(f"{path}: not a CSV file ({error})") from None
    for line, row in enumerate(rows, 1):
        try:
            block, _tag, _case, cycles, seconds = row
            cycles, seconds = int(cycles), float(seconds)
        except ValueError:
            raise ValueError(f"{path}:{line}: expected block,tag,test,cycles,seconds, got {row}") from None
        total = out[block]
        total[0] += cycles
        total[1] += seconds
        total[2] += 1
    return out


def main(argv=None):
    parser = Parser(prog="speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT, help="default: build/sim_speed.csv")
    path = parser.parse_args(argv).csv
    if not path.exists() and path == DEFAULT:
        raise FileNotFoundError(f"no runs recorded yet ({path} is missing): run a simulation first")
    rows = sorted(totals(path).items())
    print(f"{'block':<18}{'runs':>6}{'cycles':>12}{'seconds':>10}{'cycles/s':>10}")
    for block, (cycles, seconds, runs) in rows:
        print(f"{block:<18}{runs:>6}{cycles:>12}{seconds:>10.1f}{cycles / max(seconds, 1e-9):>10.0f}")


if __name__ == "__main__":
    run("speed", main)
