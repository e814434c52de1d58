"""MRC: EV spraying and SRv6 uSID forwarding on a two-plane fabric: a lossy EV, a collision, failures.

The closed loop of ``scenarios/mrc_fabric.py`` (2 planes x 4 spines x 8 leaves; QPs spraying over the EVs
their ``EvSelector`` picks, the ``EvExpander``'s OCP profile turning an EV into the SRv6 path, the
``UsidForwarder`` at leaf 0 with ECN and trimming) on the golden models. Three runs (the paper's Figs 12-14):

(a) 20 % drop on one EV of 16: demoted at its first loss event, a same-plane backup takes over, goodput held
    (against the same run without the drop);
(b) two QPs with every plane-0 EV forced onto one uplink: ECN echoes put the collided EVs in SKIP and move
    traffic off it (against the same run with the echoes ignored);
(c) uplinks failed one by one (4 of 8): goodput about constant, against single-path ECMP, which carries one
    uplink's rate (1 packet every ``SERVICE`` cycles: 0.33 packet/cycle before any failure) and nothing for
    ``CONVERGE`` cycles after its uplink fails. The thin test runs the loop with the RTL in it.
"""
import statistics
import time

from scenarios.common import OUT, figure, write_csv, write_summary
from scenarios.mrc_fabric import PATHS, SERVICE, Fabric, ModelEngine, ev_of

__all__ = ["DROP_EV", "DROP", "FAILURES", "CYCLES", "ecmp", "runs", "arguments", "main"]

DROP_EV, DROP = ev_of(5, 1), 0.2
FAILURES = {0: 1000, 4: 2500, 1: 4000, 5: 5500}
CYCLES = {"drop": 3000, "collide": 3000, "fail": 7000}
ECMP_PATH, CONVERGE = 0, 500


def ecmp(cycles, window):
    """Single-path ECMP goodput per window: one uplink's rate while its path is up, 0 for ``CONVERGE`` cycles
    after it fails, then rehashed onto the lowest-numbered live uplink."""
    path, down_until, out, got = ECMP_PATH, -1, [], 0
    for t in range(cycles):
        failed = {p for p, at in FAILURES.items() if at <= t}
        if path in failed and down_until < 0:
            down_until = t + CONVERGE
        if 0 <= down_until <= t:
            path, down_until = min(p for p in range(PATHS) if p not in failed), -1
        if down_until < 0 and t % SERVICE == 0:
            got += 1
        if (t + 1) % window == 0:
            out.append(got / window)
            got = 0
    return out


def fabrics(seed):
    """Every run's loop: the three of the paper and their references."""
    return {"drop": Fabric(seed, drop_ev=DROP_EV, drop=DROP), "no_drop": Fabric(seed),
            "collide": Fabric(seed, qps=2, rate_cycles=2, collide=0),
            "ignore": Fabric(seed, qps=2, rate_cycles=2, collide=0, react_ecn=False),
            "fail": Fabric(seed, failures=FAILURES)}


def runs(seed):
    """Every run on the golden models: name -> finished ``Fabric``."""
    out = fabrics(seed)
    for name, fabric in out.items():
        fabric.run(ModelEngine(), CYCLES[{"no_drop": "drop", "ignore": "collide"}.get(name, name)])
    return out


#: Samples of the collision runs left out of the mean queue (the queue builds up first).
QUEUE_WARMUP = 5


def arguments(parser):
    """The scenario's options (``python -m scenarios mrc --help``): the runs are the paper's three."""


def main(args, out=OUT, name="mrc"):
    wall = time.perf_counter()
    r = runs(args.seed)
    window = r["fail"].window
    base = ecmp(CYCLES["fail"], window)
    rows = []
    for run, fabric in r.items():
        for t, g, paths, depths in fabric.samples:
            on_x = sum(n for (q, p), n in paths.items() if p == 0)
            rows.append((run, t, round(g, 3), on_x, sum(paths.values()), depths[0]))
    rows += [("ecmp", (k + 1) * window, round(g, 3), "", "", "") for k, g in enumerate(base)]
    csv = write_csv(name, ["run", "cycle", "goodput", "packets_on_uplink0", "packets", "uplink0_queue"], rows, out)
    good = {run: [g for _, g, _, _ in f.samples[1:]] for run, f in r.items()}
    queue = {run: statistics.fmean(d[0] for _, _, _, d in r[run].samples[QUEUE_WARMUP:])
             for run in ("collide", "ignore")}
    with figure(name, cols=3, width=5, height=3.8, seed=args.seed, out=out) as (fa, fb, fc):
        t = lambda run: [s[0] for s in r[run].samples]          # noqa: E731
        fa.plot(t("no_drop"), [s[1] for s in r["no_drop"].samples], color="grey", lw=3, alpha=0.5, label="no drop")
        fa.plot(t("drop"), [s[1] for s in r["drop"].samples], "o-", ms=3, label=f"{DROP:.0%} drop on one EV")
        if r["drop"].demoted_at is not None:
            fa.axvline(r["drop"].demoted_at, color="black", ls=":", label="the EV demoted")
        fa.set(title="(a) a lossy EV (the lines overlap: no loss of goodput)", xlabel="cycle",
               ylabel="goodput, packets/cycle", ylim=(0, 1.2))
        for run, label in (("collide", "ECN echo acted on"), ("ignore", "ECN echo ignored")):
            fb.plot(t(run), [s[3][0] for s in r[run].samples], label=f"{label}: uplink-0 queue")
        fb.set(title="(b) 2 QPs' plane-0 EVs on uplink 0", xlabel="cycle", ylabel="uplink-0 data queue, packets")
        fc.plot(t("fail"), [s[1] for s in r["fail"].samples], label="MRC spraying")
        fc.plot([(k + 1) * window for k in range(len(base))], base, label=f"single-path ECMP (one uplink: 1/{SERVICE})")
        for at in FAILURES.values():
            fc.axvline(at, color="grey", ls=":")
        fc.set(title="(c) uplinks failed one by one (dotted)", xlabel="cycle", ylabel="goodput, packets/cycle",
               ylim=(0, 1.2))
        for ax in (fa, fb, fc):
            ax.legend(fontsize="x-small")
    mean = statistics.fmean
    lines = [f"mrc, seed {args.seed}: 2 planes x 4 spines x 8 leaves, 16 EVs per QP",
             f"(a) EV demoted at cycle {r['drop'].demoted_at} after {r['drop'].bad_losses} loss event(s); goodput "
             f"{mean(good['drop']):.2f} (no drop {mean(good['no_drop']):.2f}); paper: inactive at once, line rate",
             f"(b) uplink-0 queue {queue['ignore']:.1f} -> {queue['collide']:.1f} packets, goodput "
             f"{mean(good['ignore']):.2f} -> {mean(good['collide']):.2f} when the ECN echo is acted on; trims "
             f"{r['ignore'].stats.get('trimmed', 0)} -> {r['collide'].stats.get('trimmed', 0)}",
             f"(c) 4 of 8 uplinks failed: goodput {mean(good['fail']):.2f} (min {min(good['fail']):.2f}) vs "
             f"single-path ECMP {mean(base[1:]):.2f}; paper: throughput largely unaffected",
             f"{time.perf_counter() - wall:.1f} s", f"written {csv}, {out / name}.png"]
    write_summary(name, lines, out)
    return rows
