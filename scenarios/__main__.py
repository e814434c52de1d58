"""``python -m scenarios NAME [options]``: run one scenario on the golden models; it writes
``<out>/<NAME>.csv``, ``.png`` and ``.txt`` (the summary, also printed). ``python -m scenarios NAME --help``
lists a scenario's settings; ``make scenario NAME=... ARGS='...'`` runs the same."""
import importlib
import sys
from pathlib import Path

from scenarios import SCENARIOS
from scenarios.common import OUT
from tools.cli import Parser, integer, run

USAGE = "python -m scenarios NAME [--help] [options]"


def parser(name):
    """The command line of scenario ``name``."""
    module = importlib.import_module(f"scenarios.{name}")
    doc = module.__doc__.strip()
    p = Parser(prog=f"python -m scenarios {name}", description=doc.split("\n\n")[0])
    p.add_argument("--seed", type=integer(0), default=None, help="the run's seed (default: INNET_SEED or 1)")
    p.add_argument("--out", default=str(OUT), help="directory of the CSV, PNG and summary (default %(default)s)")
    module.arguments(p)
    return module, p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {USAGE}\n\n{__doc__.split(chr(10) * 2)[0]}\n\nscenarios:")
        for name, what in SCENARIOS.items():
            print(f"  {name:<10} {what}")
        return 0
    if argv[0] not in SCENARIOS:
        raise ValueError(f"no scenario {argv[0]!r}: one of {', '.join(SCENARIOS)}")
    module, p = parser(argv[0])
    args = p.parse_args(argv[1:])
    if args.seed is None:
        from scenarios.net import seed
        args.seed = seed()
    module.main(args, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(run("scenarios", main))
