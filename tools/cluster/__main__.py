"""``python -m tools.cluster regress|mutants|sweep [--cluster local|slurm|lsf|pbs|sge] [--scheduler tcp://HOST:8786]
[--jobs N] [--cluster-option KEY=VALUE ...] ...``: a campaign on a Dask cluster.

- ``regress``: the seed sweep of ``tools.regress`` (``--seeds``, ``--first``, ``--tests``, ``-k``), one unit per
  test file and seed -> ``<out>/report.xml`` (JUnit; default ``build/regress``);
- ``mutants``: ``tools.mutants``' run of a block or all (``--n``, ``--seed``, ``--id``, ``--no-formal``,
  ``--no-baseline``), one unit per mutant -> ``<out>/<block>.csv`` (default ``build/mutants``);
- ``sweep``: a scenario over ``--grid KEY=V1,V2,...``, one unit per point -> ``<out>/<NAME>.csv`` (default
  ``build/sweeps``).

By default the cluster is a ``LocalCluster`` of ``--jobs`` worker processes on this machine. The report lists
each failure with its replay command and each unit that ran again (its worker died, or it raised).
"""
import random
import shutil
import sys
from pathlib import Path

import registry
from tools.cli import Parser, integer, run
from tools.cluster import engine


def common(parser, out):
    parser.add_argument("--cluster", choices=list(engine.CLUSTERS), default="local",
                        help="local worker processes (default) or a batch system's jobs (dask-jobqueue)")
    parser.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (tcp://host:8786)")
    parser.add_argument("--jobs", type=integer(1), default=2, help="workers: local processes or batch jobs (default 2)")
    parser.add_argument("--cluster-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a dask-jobqueue cluster's keyword argument (queue=, account=, walltime=, memory=, ...)")
    parser.add_argument("--out", type=Path, default=out, help=f"directory of the results (default {out})")
    parser.add_argument("--job-script", action="store_true",
                        help="print the batch job a batch system's cluster submits per worker, run nothing")


def parser():
    p = Parser(prog="python -m tools.cluster", description=__doc__.split("\n\n")[0])
    kinds = p.add_subparsers(dest="kind", required=True)
    r = kinds.add_parser("regress", help="seed sweep of the randomized testbenches")
    r.add_argument("--seeds", type=integer(1), default=4, help="number of seeds (default 4)")
    r.add_argument("--first", type=integer(0, (1 << 32) - 1), default=1, help="first seed (default 1)")
    r.add_argument("--tests", nargs="*", default=[], help="test paths or node ids (default: testbenches)")
    r.add_argument("-k", dest="select", default="", help="pytest -k expression selecting tests")
    common(r, "build/regress")
    m = kinds.add_parser("mutants", help="mutation run of a block or all")
    m.add_argument("block", help="a registered block, or all")
    m.add_argument("--n", type=integer(1), default=None, help="mutants to draw per block (default: all)")
    m.add_argument("--seed", type=integer(0), default=1, help="sample seed and traffic seed (default 1)")
    m.add_argument("--id", type=integer(0), action="append", default=[], help="only this mutant (repeatable)")
    m.add_argument("--pytest-jobs", type=integer(0), default=0, help="pytest-xdist workers per unit (default 0)")
    m.add_argument("--no-formal", action="store_true", help="simulation only")
    m.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    common(m, "build/mutants")
    s = kinds.add_parser("sweep", help="a scenario over a grid of its options")
    s.add_argument("name", help="the scenario (python -m scenarios --help lists them)")
    s.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="an option of the scenario and its values (repeatable: the cross product)")
    common(s, "build/sweeps")
    return p


def plans(args):
    """[(block, mutant ids)] of a mutants campaign, drawn as ``tools.mutants`` draws them."""
    from tools import mutants
    if args.block == "all":
        if args.id:
            raise ValueError("--id needs one block, not all")
        names = [n for n in registry.names() if mutants.generate(mutants.Sources(registry.block(n).sources()).text)]
    else:
        names = [registry.block(args.block).name]
    found = []
    for name in names:
        every = mutants.generate(mutants.Sources(registry.block(name).sources()).text)
        for n in args.id:
            if n >= len(every):
                raise ValueError(f"--id {n}: {name} has mutants 0..{len(every) - 1}")
        chosen = [m for m in every if m.id in args.id] if args.id else every
        if args.n is not None and args.n < len(chosen):
            chosen = sorted(random.Random(args.seed).sample(chosen, args.n), key=lambda m: m.id)
        found.append((name, [m.id for m in chosen]))
    return found


def campaign(args, client):
    """Run the campaign ``args`` asks for on ``client``; whether nothing failed."""
    from tools.cluster import mutants, regress, sweep
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    work = out / "work"
    for stale in ("attempts", "runs"):
        shutil.rmtree(work / stale, ignore_errors=True)
    runner = engine.Campaign(client, work, args.kind)
    if args.kind == "regress":
        if args.first + args.seeds > 1 << 32:
            raise ValueError(f"--first {args.first} + --seeds {args.seeds} exceeds the 32-bit seed range")
        ok, results = regress.campaign(runner.run, args.seeds, args.first, args.tests, args.select, out)
    elif args.kind == "mutants":
        todo = mutants.units(plans(args), args.seed, not args.no_formal, args.pytest_jobs, not args.no_baseline, work)
        results = runner.run(todo)
        ok = mutants.merge(todo, results, out)
    else:
        todo = sweep.units(args.name, sweep.grid(args.grid), work)
        results = runner.run(todo)
        ok = sweep.merge(args.name, todo, results, out)
    retried = runner.retried(results)
    print("\n".join([f"{args.kind}: {len(retried)} units ran again" + (":" if retried else ""), *retried]))
    return ok


def main(argv=None):
    args = parser().parse_args(argv)
    if args.job_script:
        cluster = engine.batch_cluster(args.cluster, args.cluster_option)
        print(cluster.job_script())
        cluster.close()
        return
    client = engine.connect(args.cluster, args.scheduler, args.jobs, args.cluster_option)
    try:
        ok = campaign(args, client)
    finally:
        client.close_all()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    run("cluster", main)
