"""The stages of a mutation run (``tools.mutants``) before and after the block's testbenches and proofs.

Before: *screening* (tools/screening.py). Each block's sources are written once as a mutant schemata
(tools/schemata.py) into ``build/mutants/<block>/schemata``; there the checked engine runs the soak
traffic of each design the block is part of (``designs``: the block with its soak parameters, each of
its registry variants, and the registered blocks whose testbenches are in its ``tests``: the Spillway top
for the switch side and the links) against every mutant still alive, one C++ build per design. A
mutant whose sites are elaboration-time Python (``static``) gets a build of its own per design
(``schemata.forcing``); one Amaranth cannot elaborate is ``invalid``; one no design elaborates survives
screening unseen. After: the *miter* (tools/miter.py) of each mutant that every simulation and proof let
pass, on the first design that elaborates it.

Both stages run ``jobs`` processes at a time; ``Progress`` prints how many mutants are decided, of how
many, and an estimate of the time left.
"""
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from registry import BLOCKS, ROOT
from testbenches.runner import block_of, configs_of

__all__ = ["designs", "Progress", "Screening", "miter"]

#: Seconds a screening process may take, and a miter (``make mutants``'s ``--miter-timeout``): the miters of
#: equivalent mutants prove in well under a minute; one that runs past leaves a survivor to argue.
TIMEOUT, MITER = 1800, 180
#: The soak traffic and model outputs the screenings of one campaign share (``tools.screening.stimulus``),
#: emptied when a campaign (``tools.mutants``' command) starts.
STIMULI = ROOT / "build" / "screening-stimuli"
#: The Verilator runtime's and the harness's objects every screening build shares (``tools.screening.build``),
#: whichever tree it runs in.
OBJECTS = ROOT / "build" / "screening-runtime"


def designs(b):
    """[(design, variant)] the block ``b``'s mutants are screened on, in order: the block, each of its
    registry variants, each parameter set of its testbench other than the soak's (variant ``tb-<config>``:
    odd sizes, small counters), the registered designs whose testbenches are in its ``tests``."""
    from testbenches.checked import soak_params
    from tools.screening import TESTBENCH
    found = [(b.name, None)] + [(b.name, v) for v in b.variants]
    soak = b.make_params(soak_params(b.name)["params"]).as_dict()
    found += [(b.name, TESTBENCH + config) for config, params in configs_of(b.testbench()).items()
              if isinstance(params, b.params) and params.as_dict() != soak]
    for test in b.tests:
        name = block_of(test.removesuffix(".py").replace("/", "."))
        if name in BLOCKS and (name, None) not in found:
            found.append((name, None))
    return found


def label(design, variant):
    return design + (f"[{variant}]" if variant else "")


class Progress:
    """Mutants decided of ``total``, the time so far and an estimate of the time left, one line a step;
    ``decided``: the (block, id) of the mutants the step decided. The estimate is the pace of the last
    ``WINDOW`` steps that decided some (screening decides hundreds a minute, the testbench stage a few)."""

    WINDOW = 20

    def __init__(self, total):
        self.total, self.decided, self.start = total, set(), time.monotonic()
        self.lock, self.recent = threading.Lock(), collections.deque([(self.start, 0)], maxlen=self.WINDOW + 1)
        self.builds, self.runs, self.simulated, self.forced = 0, 0, 0.0, 0

    def screened(self, runs=0, seconds=0.0, forced=0):
        """Count a schemata build with its ``runs`` mutant runs and their ``seconds`` of simulation, or (``forced``)
        static mutants screened on builds of their own; ``summary`` reports them."""
        with self.lock:
            self.builds += not forced
            self.runs, self.simulated, self.forced = self.runs + runs, self.simulated + seconds, self.forced + forced

    def summary(self):
        """The campaign's closing line: mutants decided, its time, and screening's throughput at C++ speed."""
        rate = f" ({self.runs / self.simulated:.1f} runs/s)" if self.runs and self.simulated else ""
        return (f"mutants: {len(self.decided)} of {self.total} decided in {time.monotonic() - self.start:.0f} s; "
                f"screening: {self.runs} mutant runs on {self.builds} schemata builds in {self.simulated:.1f} s of "
                f"C++ simulation{rate}; static mutants on builds of their own: {self.forced}")

    def __call__(self, decided, message):
        with self.lock:
            before = len(self.decided)
            self.decided.update(decided)
            done, now = len(self.decided), time.monotonic()
            if done > before:
                self.recent.append((now, done))
            (then, done_then), pace = self.recent[0], None
            if done > done_then and now > then:
                pace = (now - then) / (done - done_then)
            eta = f", ETA {pace * (self.total - done):.0f} s" if pace and 0 < done < self.total else ""
            print(f"mutants: [{done}/{self.total}, {now - self.start:.0f} s{eta}] {message}", flush=True)


def kill_session(session):
    """Kill every process of ``session`` (a process started with ``start_new_session``, and all it
    started, even those in process groups of their own: SymbiYosys's solvers)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session:
                os.kill(int(stat.parent.name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue                    # gone meanwhile


def _python(tree, args, what, timeout=TIMEOUT):
    """Run ``python -m <args>`` in ``tree``; ``RuntimeError`` naming ``what`` when it fails or runs past
    ``timeout`` seconds (then it and all it started are killed)."""
    env = dict(os.environ, INNET_SCREEN_RUNTIME=str(OBJECTS),
               INNET_SCREEN_STIMULI=str(STIMULI))
    with subprocess.Popen([sys.executable, "-m", *args], cwd=tree, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(process.pid)
            process.communicate()
            raise RuntimeError(f"{what} ran past {timeout} s") from None
    if process.returncode:
        tail = (err or out).strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"{what} failed: {tail[0]}")


class Screening:
    """The screening of the mutants ``ids`` of block ``b`` in its schemata ``tree``: ``run`` screens them on
    every design's one build (of the sites of the mutants still alive: ``--mutants``), ``force`` static
    mutants on builds of their own (``statics``: those left),
    ``verdicts`` gives {id: {screen, reason, place}}: ``screen`` one of killed, pass, invalid (no design
    before the first that cannot elaborate it can; one that can, ``builds``, makes it killed); ``place`` the
    (design, variant) that first elaborates the mutant as a change (None: none does)."""

    def __init__(self, b, tree, ids, packets, seed):
        self.b, self.tree, self.packets, self.seed = b, tree, packets, seed
        self.alive, self.out, self.places, self.where, self.builds = set(ids), {}, {}, {}, {}

    def _screening(self, design, variant, path, *args):
        _python(self.tree, ["tools.screening", design, "--out", str(path), "--packets", str(self.packets), "--seed",
                            str(self.seed), *args, *(["--variant", variant] if variant else [])],
                f"screening {self.b.name} on {label(design, variant)}")
        return json.loads(path.read_text())

    def run(self, progress):
        for design, variant in designs(self.b):
            if not self.alive:
                break
            name = label(design, variant)
            report = self._screening(design, variant, self.tree / "build" / f"screening-{name}.json",
                                     "--mutants", ",".join(map(str, sorted(self.alive))))
            for n, seen in report["outcomes"].items():
                n = int(n)
                if n not in self.alive:
                    continue
                if "invalid" in seen:
                    self._not_elaborated(n, design, variant)
                    continue
                self.builds.setdefault(n, (design, variant))
                if "selected" in seen or "static" in seen:
                    self.places.setdefault(n, (design, variant))
                if "static" in seen:
                    self.where.setdefault(n, []).append((design, variant))
            if "skipped" not in report and report["cycles"] is not None:     # the design was built and run
                progress.screened(len(report["results"]), report["seconds"]["runs"])
            killed = [int(n) for n, r in report["results"].items() if r["killed"] and int(n) in self.alive]
            for n in killed:
                self.out[n] = {"screen": "killed", "reason": f"{name}: {report['results'][str(n)]['reason']}",
                               "place": self.places.get(n)}
                self.alive.discard(n)
            progress({(self.b.name, n) for n in self.out}, f"screening {self.b.name} on {name}: " + (
                f"skipped: {report['skipped']}" if "skipped" in report else
                f"{len(killed)} killed of {len(report['results'])} run, {len(self.alive)} left"))

    def _not_elaborated(self, n, design, variant, detail=None):
        """Decide mutant ``n``, which Amaranth cannot elaborate on ``design`` (``variant``; ``detail``: why):
        killed there if an earlier design elaborates it (these parameters catch it, as its testbench's
        elaboration would fail on them), invalid otherwise."""
        name, first = label(design, variant), self.builds.get(n, (design, variant))
        if first != (design, variant):
            why = f"Amaranth cannot elaborate it on {name} (it can on {label(*first)})"
            self.out[n] = {"screen": "killed", "place": first, "reason": why + (f": {detail}" if detail else "")}
        else:
            self.out[n] = {"screen": "invalid", "reason": detail or f"Amaranth cannot elaborate it on {name}",
                           "place": None}
        self.alive.discard(n)

    def statics(self):
        """The mutants left that some design elaborates as elaboration-time Python."""
        return [n for n in sorted(self.alive) if n in self.where]

    def unbuilt(self, ids):
        """Leave the static mutants ``ids`` unscreened: no build of their own (an argument decides them)."""
        for n in ids:
            self.out[n] = {"screen": "-", "reason": "elaboration-time, not built", "place": self.places.get(n)}
            self.alive.discard(n)

    def force(self, ids):
        """Screen the static mutants ``ids`` on builds of their own, design by design (one process per design:
        its traffic and model outputs computed once), each on the designs where it is static until one kills
        it; returns {id: what became of it} (killed, invalid or pass)."""
        left = list(ids)
        for design, variant in designs(self.b):
            batch = [n for n in left if (design, variant) in self.where[n]]
            if not batch:
                continue
            name = label(design, variant)
            results = self._screening(design, variant, self.tree / "build" / f"screening-{name}-m{batch[0]}.json",
                                      "--force", ",".join(map(str, batch)))["results"]
            for n in batch:
                result = results[str(n)]
                if result.get("invalid"):
                    self._not_elaborated(n, design, variant, result["reason"])
                elif result["killed"]:
                    self.out[n] = {"screen": "killed", "reason": f"{name}, a build of its own: {result['reason']}",
                                   "place": self.where[n][0]}
                else:
                    continue
                self.alive.discard(n)
                left.remove(n)
        return {n: self.out[n]["screen"] if n in self.out else "pass" for n in ids}

    def verdicts(self):
        out = dict(self.out)
        for n in self.alive:
            place = self.places.get(n)
            out[n] = {"screen": "pass", "place": place, "reason": (
                f"survives {self.packets} packets of soak traffic on {', '.join(label(*d) for d in designs(self.b))}"
                if place else "no registered design with its soak parameters builds it")}
        return out


def miter(b, tree, n, place, depth, timeout=MITER):
    """(verdict, detail) of the miter of mutant ``n`` of block ``b`` on ``place`` (design, variant); the
    verdict ``timeout`` or ``error`` when it gives none."""
    design, variant = place
    path = tree / "build" / f"miter-{label(design, variant)}-{n}.json"
    try:
        _python(tree, ["tools.miter", design, str(n), "--out", str(path), "--depth", str(depth),
                       *(["--variant", variant] if variant else [])], f"the miter of {b.name} #{n}", timeout)
    except RuntimeError as error:
        return ("timeout" if "ran past" in str(error) else "error"), str(error)
    result = json.loads(path.read_text())
    return result["verdict"], f"miter on {label(design, variant)}: {result['detail']} ({result['seconds']:.0f} s)"
