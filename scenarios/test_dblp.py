"""DBLP scenario: rounds of E packets under background loss plus microbursts, three loss policies.

One sender streams rounds of ``E`` one-beat packets (job 0, round r, phase ``r * PHASES // rounds``:
the training phases in order) into the ``BoundedLossTracker``, at most ``WINDOW`` rounds
outstanding, one packet per cycle on the wire. The network loses a first transmission with the
background probability, and every ``BURST_EVERY``-th round is hit by a microburst at a random
packet: a Gilbert-Elliott channel forced into its Bad state (every packet lost) that leaves it with
probability ``BURST_EXIT`` per packet. The tracker's deadline is the retransmission timeout: on a
NACK the sender resends the round from the first missing index (RETX; background loss only).
Policies (the phase table written on the ``cfg`` port): *reliable* (tau = 0: rounds close FULL
only), *static* tau and *phase*-scheduled tau (``TAUS``). Per round: latency (close cycle - cycle
its first packet went on the wire), NACKs, delivered loss.

Oracle: with i.i.d. loss p (no bursts), a round closes without a NACK iff at most E - need packets
are lost, so the fraction of such rounds must fall in the acceptance interval of
P(Binomial(E, p) <= E - need) (``models.bounded_loss_tracker_oracle``), over a sweep of p.

The closed loops run on the golden model (``step``, the contract's cycle); every cycle's inputs
(packets, table writes) are then replayed on the RTL under Verilator, where the lockstep compares
every output with the golden model (deterministic: the closed loop's outputs), so every figure is
the RTL's. Output: ``build/scenarios/dblp.csv`` (per round), ``dblp_sweep.csv``
and ``dblp.png``. ``INNET_SCALE=n`` runs n times as many rounds; ``python -m scenarios.test_dblp
--scale n`` runs the closed loops on the golden model alone (no Verilator) and writes the same files.
"""
import collections
import json
import os
import random
import struct
import sys

import cocotb
import pytest
from cocotb.triggers import RisingEdge

from models import wire
from models.bounded_loss_tracker import KINDS, BoundedLossTrackerModel, BoundedLossTrackerParams, need_of
from models.bounded_loss_tracker_oracle import GilbertElliott, acceptance, p_no_nack
from models.headers import dblp_packet
from scenarios.common import OUT, figure, write_csv
from testbenches import runner, tb
from tools.cli import Parser, integer, run

#: The cocotb tests' default parameter set (16 slots, E <= 64 in 32-bit words, 64-byte bus): its build is shared.
PARAMS = BoundedLossTrackerParams()
E, WINDOW, DEADLINE, PHASES = 32, 2, 200, 4
BACKGROUND, BURST_EVERY, BURST_EXIT = 0.005, 4, 0.35
#: tau (Q0.8) per phase: reliable, static 1/8, phase-scheduled (tolerant mid-training, strict at the end).
TAUS = {"reliable": (0, 0, 0, 0), "static": (32, 32, 32, 32), "phase": (32, 64, 32, 8)}
#: Oracle sweep: i.i.d. loss rates, static tau.
SWEEP_P, SWEEP_TAU = (0.02, 0.05, 0.08, 0.12, 0.16), 32
SCALE = int(os.environ.get("INNET_SCALE") or 1)
ROUNDS, SWEEP_ROUNDS = 48 * SCALE, 150 * SCALE
ALPHA = 1e-3
PORTS = ("fwd", "close", "nack")
TEMPLATE = bytes(dblp_packet(payload=bytes(8), sport=50000))


def seed():
    """The run's seed: ``INNET_SEED`` if set, else 1 (the run reported in the README)."""
    return runner.traffic_seed(default=1)


def packet(rnd, idx, phase, retx=False):
    """Packet ``idx`` of round ``rnd`` (the scapy template with the shim patched)."""
    raw = bytearray(TEMPLATE)
    flags = (wire.DBLP_LAST if idx == E - 1 else 0) | (wire.DBLP_RETX if retx else 0)
    struct.pack_into(wire.DBLP_STRUCT, raw, wire.DBLP_OFFSET, wire.DBLP_VERSION << 4 | flags, phase << 4,
                     0, rnd, idx, E, 0)
    return bytes(raw)


class Channel:
    """First transmissions: i.i.d. background loss ``p``; microbursts forced at every ``burst_every``-th
    round (a Gilbert-Elliott channel put in its Bad state at a random packet). Retransmissions: ``p``."""

    def __init__(self, p, burst_every, rng):
        self.p, self.burst_every, self.rng = p, burst_every, rng
        self.ge = GilbertElliott(0.0, BURST_EXIT, loss_good=p, loss_bad=1.0, seed=rng.randrange(1 << 30))

    def first(self, rnd):
        """Losses of round ``rnd``'s first transmission: (lost flags, packets lost to the burst)."""
        onset = self.rng.randrange(E) if self.burst_every and rnd % self.burst_every == self.burst_every - 1 else None
        lost, burst = [], 0
        for idx in range(E):
            if idx == onset:
                self.ge.bad = True
            bad = self.ge.bad
            lost.append(self.ge.lost())
            burst += bad
        return lost, burst

    def retx(self):
        return self.rng.random() < self.p


def simulate(taus, p, burst_every, rounds, seed):
    """One closed loop on the golden model; returns (per-round stats, every cycle's inputs: the RTL
    replay's)."""
    rng = random.Random(seed)
    channel = Channel(p, burst_every, rng)
    m = BoundedLossTrackerModel(PARAMS)
    ready = {f"{name}__ready": 1 for name in PORTS}   # outputs always ready
    cfgs = collections.deque({"phase": ph, "tau": taus[ph], "deadline": DEADLINE} for ph in range(PHASES))
    wire_q = collections.deque()                     # (raw, lost, round): one goes on the wire per cycle
    stats, record, outstanding = [], [], set()
    cycle = started = 0
    limit = 2000 * (rounds + 10)
    while started < rounds or outstanding or m.close is not None:
        assert cycle < limit, f"the loop has not finished in {limit} cycles"
        while (started < rounds and len(outstanding) < WINDOW and not cfgs
               and (started or not any(s.dirty for s in m.slots))):      # after the clear engine's wipe
            phase = started * PHASES // rounds
            lost, burst = channel.first(started)
            wire_q.extend((packet(started, idx, phase), lost[idx], started) for idx in range(E))
            stats.append({"round": started, "phase": phase, "tau": taus[phase], "burst": burst,
                          "lost_first": sum(lost), "last_in": not lost[-1], "first": None, "nacks": 0})
            outstanding.add(started)
            started += 1
        row = cfgs.popleft() if cfgs else None
        head = wire_q[0] if wire_q else None
        if head is not None and stats[head[2]]["first"] is None:
            stats[head[2]]["first"] = cycle
        beat = {"data": int.from_bytes(head[0], "little"), "keep": (1 << len(head[0])) - 1, "first": 1,
                "last": 1, "meta": {}} if head is not None and not head[1] else None
        inputs = {"i__valid": int(beat is not None), "i__payload": beat, "cfg__valid": int(row is not None),
                  "cfg__payload": row, **ready}
        out = m.step(inputs)
        record.append(inputs)
        if head is not None and (head[1] or out["i__ready"]):
            wire_q.popleft()
        if out["close__valid"]:                       # outputs always ready: taken this cycle
            close = out["close__payload"]
            s = stats[close["round"]]
            s.update(kind=KINDS[close["kind"]], count=close["count"], need=close["need"], latency=cycle - s["first"])
            outstanding.discard(close["round"])
        if out["nack__valid"]:
            n = out["nack__payload"]
            stats[n["round"]]["nacks"] += 1
            phase = stats[n["round"]]["phase"]
            resend = [(packet(n["round"], idx, phase, retx=True), channel.retx(), n["round"])
                      for idx in range(n["missing"], E)]
            wire_q.extendleft(reversed(resend))       # retransmissions go first
        cycle += 1
    return stats, record


def runs(seed_value):
    """Every closed loop of the scenario: name -> (stats, record)."""
    out = {name: simulate(taus, BACKGROUND, BURST_EVERY, ROUNDS, seed_value) for name, taus in TAUS.items()}
    for k, p in enumerate(SWEEP_P):
        out[f"sweep p={p}"] = simulate((SWEEP_TAU,) * PHASES, p, 0, SWEEP_ROUNDS, seed_value * 1000 + k)
    return out


class Replay(tb.BlockTB):
    """The tracker and its model in lockstep, the inputs driven from a closed loop's record."""

    name = "bounded_loss_tracker"

    async def play(self, record):
        """Drive ``record`` (one cycle's inputs after another, flat port names) into the RTL."""
        layouts, driven = self.lockstep.ports.inputs, {}
        for inputs in record:
            for port, value in inputs.items():
                if port.endswith("__payload"):
                    if value is None:
                        continue
                    value = tb.pack(layouts[port], value)
                if driven.get(port) != value:
                    getattr(self.dut, port).value = driven[port] = value
            await RisingEdge(self.dut.clk)


@cocotb.test()
async def dblp(dut):
    """Every closed loop, replayed on the RTL cycle by cycle (its inputs driven; the lockstep compares
    every output with the model's)."""
    t = Replay(dut)
    for port in ("i__valid", "cfg__valid"):
        getattr(dut, port).value = 0
    result, total = {}, 0
    for name, (stats, record) in runs(tb.seed()).items():
        await t.reset(3)
        await t.play(record)
        dut.i__valid.value = dut.cfg__valid.value = 0
        total += len(record)
        cocotb.log.info("%s: %d cycles replayed on the RTL, every output as the model", name, len(record))
        result[name] = stats
    await t.edge()                                    # the last cycle's counts, after its edge
    t.check_counters()
    (tb.run_dir() / "result.json").write_text(json.dumps({"stats": result, "cycles": total}))


def percentile(values, q):
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-q * len(ordered) // 100) - 1))]


def summarise(result, seed_value):
    """CSV, PNG and headline from the per-round stats; asserts the SPEC's claims."""
    rows = [(name, s["round"], s["phase"], s["tau"], s["burst"], s["lost_first"], s["nacks"], s["kind"],
             s["count"], s["need"], s["latency"]) for name, stats in result.items() for s in stats]
    write_csv("dblp", ["run", "round", "phase", "tau", "burst_lost", "lost_first", "nacks", "kind", "count",
                       "need", "latency"], rows)
    summary, lines = {}, []
    for name in TAUS:
        stats = result[name]
        assert len(stats) == ROUNDS and all("kind" in s for s in stats), f"{name}: a round never closed"
        for s in stats:
            if s["kind"] != "ABORT":                  # delivered loss within tau (per round)
                assert E - s["count"] <= s["tau"] * E >> 8, f"{name}: round {s['round']} lost beyond tau"
            if s["lost_first"] and not s["tau"]:     # tau = 0: any loss waits for the deadline's NACK
                assert s["nacks"] and s["latency"] >= DEADLINE, f"{name}: round {s['round']} {s}"
            if s["lost_first"] <= s["tau"] * E >> 8 and s["last_in"]:
                assert not s["nacks"] and s["latency"] < DEADLINE, f"{name}: round {s['round']} waited: {s}"
        burst = [s["latency"] for s in stats if s["burst"]]
        lat = [s["latency"] for s in stats]
        delivered = sum(E - s["count"] for s in stats if s["kind"] != "ABORT")
        summary[name] = {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat),
                         "burst_p50": percentile(burst, 50), "burst_mean": sum(burst) / len(burst),
                         "loss": delivered / (E * len(stats)), "nacks": sum(s["nacks"] for s in stats),
                         "abort": sum(s["kind"] == "ABORT" for s in stats),
                         "bounded": sum(s["kind"] == "BOUNDED" for s in stats)}
    assert all(s["kind"] in ("FULL", "ABORT") for s in result["reliable"]), "tau = 0 closed a round BOUNDED"
    assert summary["reliable"]["loss"] == 0
    for name in TAUS:
        x = summary[name]
        x["speedup"] = summary["reliable"]["burst_mean"] / x["burst_mean"]
        lines.append(f"{name}: latency p50/p99/max {x['p50']}/{x['p99']}/{x['max']}, burst rounds mean "
                     f"{x['burst_mean']:.0f} ({x['speedup']:.2f}x), delivered loss {x['loss']:.4f}, "
                     f"NACKs {x['nacks']}, aborts {x['abort']}")
    sweep = []
    for p in SWEEP_P:
        stats = result[f"sweep p={p}"]
        need = need_of(E, SWEEP_TAU)
        fraction = sum(s["nacks"] == 0 for s in stats) / len(stats)
        prob = p_no_nack(E, need, p)
        lo, hi = acceptance(len(stats), prob, ALPHA)
        sweep.append((p, len(stats), round(fraction, 4), round(prob, 4), round(lo, 4), round(hi, 4)))
        assert lo <= fraction <= hi, (f"p = {p}: no-NACK fraction {fraction} outside [{lo}, {hi}] of "
                                      f"P(Binomial({E}, {p}) <= {E - need}) = {prob:.4f}")
    write_csv("dblp_sweep", ["loss", "rounds", "no_nack_fraction", "closed_form", "lo", "hi"], sweep)
    lines.append("no-NACK fraction vs binomial: " + ", ".join(f"p={p} {f:.2f} in [{lo:.2f}, {hi:.2f}]"
                                                              for p, _, f, _, lo, hi in sweep))

    with figure("dblp", cols=3, seed=seed_value) as (cdf, bars, oracle):
        for name in TAUS:
            lat = sorted(s["latency"] for s in result[name])
            cdf.step(lat, [(k + 1) / len(lat) for k in range(len(lat))], where="post",
                     label=f"{name} (taus {'/'.join(map(str, TAUS[name]))})")
        cdf.set(xlabel="round latency (cycles)", ylabel="fraction of rounds <= latency",
                title=f"{ROUNDS} rounds of E={E}, burst every {BURST_EVERY}")
        cdf.legend(fontsize="small")
        for k, name in enumerate(TAUS):
            x = summary[name]
            bars.bar([j + 0.27 * k for j in range(3)], [x["p50"], x["p99"], x["burst_mean"]], width=0.27,
                     label=f"{name}: loss {x['loss']:.3f}, {x['speedup']:.2f}x")
        bars.set_xticks([j + 0.27 for j in range(3)], ["p50", "p99", "burst-round mean"])
        bars.set(ylabel="latency (cycles)", title="latency; legend: delivered loss, burst speedup")
        bars.legend(fontsize="small")
        ps = [row[0] for row in sweep]
        oracle.plot(ps, [row[3] for row in sweep], "k-", label=f"P(Bin(E, p) <= {E - need_of(E, SWEEP_TAU)})")
        oracle.fill_between(ps, [row[4] for row in sweep], [row[5] for row in sweep], alpha=0.2,
                            label=f"acceptance ({1 - ALPHA:.3f})")
        oracle.plot(ps, [row[2] for row in sweep], "o", label=f"measured ({SWEEP_ROUNDS} rounds each)")
        oracle.set(xlabel="i.i.d. loss rate p", ylabel="fraction of rounds closing without NACK",
                   title=f"binomial oracle, tau={SWEEP_TAU}/256")
        oracle.legend(fontsize="small")
    return summary, "; ".join(lines)


def test_dblp(record_property):
    """Bounded loss beats reliable on burst rounds; delivered loss <= tau; the binomial oracle holds."""
    from hdl.bounded_loss_tracker import BoundedLossTracker
    run = runner.run(BoundedLossTracker, PARAMS, "scenarios.test_dblp", "dblp", block="bounded_loss_tracker",
                     seed=seed())
    result = json.loads((run / "result.json").read_text())["stats"]
    summary, headline = summarise(result, seed())
    print(headline)
    record_property("innet", {"kind": "scenario", "name": "dblp", "seed": seed(), "headline": headline,
                              "files": [OUT / "dblp.csv", OUT / "dblp_sweep.csv", OUT / "dblp.png"]})
    for name in ("static", "phase"):
        assert summary[name]["speedup"] > 1, f"{name}: burst rounds {summary[name]['speedup']:.2f}x as fast"


def main(argv=None):
    """Golden model only, ``--scale`` times the rounds (no Verilator): the same CSV and PNG."""
    global ROUNDS, SWEEP_ROUNDS
    parser = Parser(prog="scenarios.test_dblp", description=main.__doc__)
    parser.add_argument("--scale", type=integer(1), default=10, help="times the suite's rounds (default 10)")
    parser.add_argument("--seed", type=integer(0), default=1, help="seed (default 1)")
    args = parser.parse_args(argv)
    ROUNDS, SWEEP_ROUNDS = 48 * args.scale, 150 * args.scale
    result = {name: stats for name, (stats, _) in runs(args.seed).items()}
    print(summarise(result, args.seed)[1])
    return 0


pytestmark = pytest.mark.xdist_group("scenario_dblp")

if __name__ == "__main__":
    sys.exit(run("scenarios.test_dblp", main))
