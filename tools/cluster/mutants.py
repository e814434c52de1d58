"""The mutation run as campaign units: a unit is one mutant of one block -> its row of the block's CSV.

``mutant(block, id, seed, formal, jobs, trees)`` is the unit: ``tools.mutants``' own steps on one mutant
(written into a copy of the repository, ``valid``, then the block's simulations and proofs, each stopping
at its first failure), giving the row ``tools.mutants.run_block`` gives it. Each unit takes a free copy
of the block's pool ``<trees>/<block>/<k>/`` (a file lock each; a worker that finds none free makes
another) and restores it after the mutant; the copies share the repository's Verilator runtime objects
(``build/verilator-runtime``, compiled once per flag set), so a mutant compiles only its own model.
``id=None`` is the unmutated baseline. The rows merge into the block's CSV (``tools.mutants.merged`` and
``report``: the same table and kill rates).
"""
import fcntl
from pathlib import Path

from registry import ROOT, block
from tools import mutants as tool
from tools.cluster.engine import Unit
from tools.regress import python

#: Verilator's runtime objects, compiled once per flag set (``testbenches.runner``): every copy shares them.
RUNTIME = ROOT / "build" / "verilator-runtime"


class Tree:
    """A free copy of the repository from ``pool`` (a directory of copies), held until the ``with`` ends."""

    def __init__(self, pool):
        self.pool = Path(pool)

    def __enter__(self):
        self.pool.mkdir(parents=True, exist_ok=True)
        k = 0
        while True:
            self.lock = open(self.pool / f"{k}.lock", "w")
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                self.lock.close()
                k += 1
        path = self.pool / str(k)
        tool.copy_tree(path)
        runtime = path / "build" / RUNTIME.name
        if not runtime.exists():
            runtime.parent.mkdir(exist_ok=True)
            runtime.symlink_to(RUNTIME, target_is_directory=True)
        return path

    def __exit__(self, *exc):
        self.lock.close()


def mutant(name, mutant_id, seed, formal, jobs, trees):
    """The unit: the row of mutant ``mutant_id`` of block ``name`` (``None``: the unmutated design's
    ``sim`` and ``formal``), run at ``seed`` with ``jobs`` pytest-xdist workers, the proofs when ``formal``."""
    b = block(name)
    sources = tool.Sources(b.sources())
    source = sources.text
    every = tool.generate(source)
    with Tree(Path(trees) / name) as tree:
        m = every[mutant_id] if mutant_id is not None else None
        row = {} if m is None else dict(id=m.id, operator=m.operator, line=m.line,
                                        nth=tool._ranks(source, every)[m.id])
        try:
            if m is not None:
                sources.write(tree, m.apply(source))
            if m is not None and not tool.valid(tree, name):
                sim = form = "invalid"
            else:
                sim = tool._pytest(tree, tool.sim_tests(b), seed, jobs, tool.TIMEOUT)
                form = tool._pytest(tree, [b.proofs()], seed, jobs, tool.TIMEOUT) if formal else "-"
        finally:
            sources.write(tree, source)
    if m is None:
        return dict(sim=sim, formal=form)
    before, after = m.describe(source)
    return dict(row, sim=sim, formal=form, before=before, after=after)


def replay(name, mutant_id, seed, formal):
    return (f"{python()} -m tools.mutants {name} --id {mutant_id} --seed {seed} --no-baseline"
            + ("" if formal else " --no-formal"))


def survived(row):
    return row.get("sim") not in (*tool.KILLED, "invalid") and row.get("formal") not in tool.KILLED


def units(plans, seed, formal, jobs, baseline, work):
    """The campaign's units: ``plans`` is [(block name, mutant ids)]; with ``baseline`` each block's
    unmutated run too (a unit of its own, ``mutants-<block>-baseline``)."""
    todo = []
    for name, ids in plans:
        proofs = formal and block(name).formal
        trees = str(Path(work) / "trees")
        if baseline:
            todo.append(Unit(f"mutants-{name}-baseline", mutant, (name, None, seed, proofs, jobs, trees),
                             f"INNET_SEED={seed} {python()} -m pytest {' '.join(tool.sim_tests(block(name)))}",
                             lambda row: row["sim"] != "pass" or row["formal"] not in ("pass", "-")))
        todo += [Unit(f"mutants-{name}-{n}", mutant, (name, n, seed, proofs, jobs, trees),
                      replay(name, n, seed, proofs), lambda row: False) for n in ids]
    return todo


def merge(todo, results, out):
    """Each block's rows merged into ``<out>/<block>.csv`` and reported (``tools.mutants.report``); whether
    every unit gave its row and every baseline passed."""
    tool.OUT = Path(out)
    tool.OUT.mkdir(parents=True, exist_ok=True)
    ok, rows = True, {}
    for u in todo:
        name, n, r = u.args[0], u.args[1], results[u.key]
        if r.error:
            print(f"  ERROR {u.key}: {r.error}; replay: {u.replay}")
            ok = False
        elif n is None:
            if u.failed(r.value):
                print(f"  FAILED {u.key}: the unmutated {name} fails its own tests: sim {r.value['sim']}, formal "
                      f"{r.value['formal']}; replay: {u.replay}")
                ok = False
        else:
            rows.setdefault(name, []).append(r.value)
    for name, found in rows.items():
        sources = tool.Sources(block(name).sources())
        proofs = next(u.args[3] for u in todo if u.args[0] == name)
        tool.report(name, sources.where, tool.merged(name, sources.text, found), proofs)
        for row in found:
            if survived(row) and not tool.why_of(tool.equivalent(name), row):
                unit = next(u for u in todo if u.args[:2] == (name, row["id"]))
                print(f"  replay #{row['id']}: {unit.replay}")
    return ok
