"""Symphony scenario: ring all-reduce with one jittery flow, with and without throttling.

A ring of ``RING`` RoCEv2 flows (one job) sends ``STEPS`` steps of ``CHUNK`` packets each. Ring
dependency (pipelined ring all-reduce): a flow sends step ``s`` only once its predecessor has
delivered step ``s - RUN_AHEAD``. Flow 0 is jittery (random pauses). All flows cross the switch
(``ProgressRegfile``, one packet per cycle) and share an egress link that sends one packet every
``SERVICE`` cycles. Senders are rate-based and window-limited; with throttling a sender halves
its rate on each CE-marked packet echoed by its receiver (a DCQCN-like CNP, ``RTT`` later) and
recovers additively; without throttling senders ignore the marks (the RTL marks in both runs).

The closed loop runs on the golden model; the cycle-by-cycle inputs and outputs (config
commands, packets, marked packets) are replayed on the RTL under Verilator. Output:
``build/scenarios/symphony.csv`` (per mode and flow, plus skew samples) and ``.png``.
"""
import collections
import json
import random

import cocotb
import pytest

from hdl.packet import beat_layout
from hdl.progress_regfile import OP_INSTALL, OP_JOB, ProgressRegfile, ProgressRegfileParams, config_layout
from models.headers import RC_SEND_MIDDLE, roce_packet
from models.packet import beats_of
from models.progress_regfile import ProgressRegfileModel
from scenarios.common import OUT, figure, replay, write_csv
from testbenches import runner, tb

PARAMS = ProgressRegfileParams(jobs=1, ring=4, table=16, step_bits=16, data_bytes=64)
RING, STEPS, CHUNK, DELTA, RUN_AHEAD = 4, 30, 4, 1, 3
SERVICE, DELAY, RTT, WINDOW = 2, 5, 40, 16
RATE, FLOOR, RECOVER, PERIOD = 0.5, 0.05, 0.05, 20        # packets/cycle; increase per PERIOD
JITTERY, PAUSE, PAUSE_P = 0, 40, 0.08
MAX_CYCLES = 20000


def qp(position):
    return 0x100 + position


class Flow:
    """A rate-based, window-limited ring sender and its receiver."""

    def __init__(self, position):
        self.position = position
        self.sent = self.delivered = self.marks = 0
        self.rate, self.credit, self.calm = RATE, 0.0, 0
        self.paused_until = 0
        self.done = None

    def packet(self, psn):
        return bytes(roce_packet(src=f"10.0.0.{self.position + 1}", dst=f"10.0.0.{(self.position + 1) % RING + 1}",
                                 qp=qp(self.position), psn=psn, op=RC_SEND_MIDDLE, payload=bytes(4)))


def commands():
    yield dict(op=OP_JOB, qp=0, job=0, position=0, chunk=CHUNK, delta=DELTA)
    for position in range(RING):
        yield dict(op=OP_INSTALL, qp=qp(position), job=0, position=position, chunk=0, delta=0)


def simulate(throttle, seed):
    """Run the closed loop; return (per-flow stats, skew samples, recorded RTL cycles)."""
    rng = random.Random(seed)
    model = ProgressRegfileModel(PARAMS)
    layout, cfg_layout = beat_layout(PARAMS.data_bytes), config_layout(1, RING, PARAMS.step_bits)
    flows = [Flow(p) for p in range(RING)]
    record = []
    for cmd in commands():
        model.config(cmd)
        record.append(({"cfg__valid": 1, "cfg__payload": tb.pack(cfg_layout, cmd), "i__valid": 0,
                        "o__ready": 1}, {"cfg__ready": 1}))
    record.append(({"cfg__valid": 0, "i__valid": 0, "o__ready": 1}, {"o__valid": 0}))
    events = collections.defaultdict(list)
    ingress, link = collections.deque(), collections.deque()
    skew, served_at, out = [], 0, None
    cycle = 0
    while cycle < MAX_CYCLES and not all(f.done is not None for f in flows):
        for kind, f, psn in events.pop(cycle, ()):
            if kind == "arrive":
                ingress.append((f, psn))
            elif kind == "deliver":
                f.delivered += 1
                if f.delivered == STEPS * CHUNK:
                    f.done = cycle
            elif kind == "cnp" and throttle:
                f.rate, f.calm = max(f.rate / 2, FLOOR), 0
        for f in flows:
            pred = flows[(f.position - 1) % RING]
            step = f.sent // CHUNK
            f.calm += 1
            if f.calm >= PERIOD:
                f.rate, f.calm = min(f.rate + RECOVER, RATE), 0
            f.credit = min(f.credit + f.rate, 1.0)
            if (f.sent < STEPS * CHUNK and cycle >= f.paused_until and f.credit >= 1.0
                    and pred.delivered // CHUNK >= step - RUN_AHEAD and f.sent - f.delivered < WINDOW):
                f.credit -= 1.0
                events[cycle + DELAY].append(("arrive", f, f.sent))
                f.sent += 1
                if f.position == JITTERY and rng.random() < PAUSE_P:
                    f.paused_until = cycle + PAUSE

        inputs = {"cfg__valid": 0, "i__valid": 0, "o__ready": 1}
        expected = {"o__valid": int(out is not None)}
        if out is not None:
            expected["o__payload"] = tb.pack(layout, out)
        out = None
        if ingress:
            f, psn = ingress.popleft()
            raw = f.packet(psn)
            steps = model.rows[0][0]
            result = model.packet(raw)
            marked = result[15] & 3 == 3 and raw[15] & 3 != 3
            assert not (marked and steps[f.position] == min(steps)), "a flow at the minimum was marked"
            if marked:
                f.marks += 1
                events[cycle + RTT].append(("cnp", f, None))
            out = beats_of(result, {"port": 0}, PARAMS.data_bytes)[0]
            link.append(f)
            beat = beats_of(raw, {"port": 0}, PARAMS.data_bytes)[0]
            inputs.update({"i__valid": 1, "i__payload": tb.pack(layout, beat)})
            expected["i__ready"] = 1
        record.append((inputs, expected))
        if link and cycle >= served_at:
            served_at = cycle + SERVICE
            events[cycle + 1 + DELAY].append(("deliver", link.popleft(), None))
        steps = model.rows[0][0]
        skew.append(max(steps) - min(steps))
        cycle += 1
    stats = [dict(flow=f.position, jittery=int(f.position == JITTERY), marks=f.marks, completion=f.done)
             for f in flows]
    return stats, skew, record


def seed():
    """The jitter's seed: ``INNET_SEED`` if set, else 1 (the run reported in the README)."""
    return runner.traffic_seed(default=1)


@cocotb.test()
async def symphony(dut):
    """Both runs' closed loops, replayed on the RTL cycle by cycle."""
    result = {}
    for throttle in (True, False):
        stats, skew, record = simulate(throttle, tb.seed())
        await replay(dut, record, f"symphony throttle={throttle}")
        cocotb.log.info("throttle=%s: %d cycles replayed on the RTL", throttle, len(record))
        result["throttle" if throttle else "none"] = {"stats": stats, "skew": skew}
    (tb.run_dir() / "result.json").write_text(json.dumps(result))


def test_symphony(record_property):
    """Throttling outpacing flows keeps the ring's step skew smaller."""
    run = runner.run(ProgressRegfile, PARAMS, "scenarios.test_symphony", "symphony", block="scenario_symphony",
                     seed=seed())
    result = json.loads((run / "result.json").read_text())
    rows = []
    for mode, r in result.items():
        job = max(s["completion"] for s in r["stats"])
        for s in r["stats"]:
            rows.append((mode, s["flow"], s["jittery"], s["marks"], s["completion"], job,
                         max(r["skew"]), round(sum(r["skew"]) / len(r["skew"]), 3)))
    write_csv("symphony", ["mode", "flow", "jittery", "marks", "completion", "job_completion",
                           "max_skew", "mean_skew"], rows)
    with figure("symphony", cols=2) as (skew_ax, bars):
        for mode, r in result.items():
            skew_ax.plot(range(len(r["skew"])), r["skew"], label=f"{mode}")
        skew_ax.set(xlabel="cycle", ylabel="max step - min step", title="ring step skew")
        skew_ax.legend()
        for offset, (mode, r) in enumerate(result.items()):
            bars.bar([s["flow"] + 0.4 * offset for s in r["stats"]], [s["completion"] for s in r["stats"]],
                     width=0.4, label=mode)
        bars.set_xticks([p + 0.2 for p in range(RING)], [str(p) for p in range(RING)])
        bars.set(xlabel=f"ring position (flow {JITTERY} jittery)", ylabel="completion cycle", title="flow completion")
        bars.legend()
    mean = {mode: sum(r["skew"]) / len(r["skew"]) for mode, r in result.items()}
    job = {mode: max(s["completion"] for s in r["stats"]) for mode, r in result.items()}
    headline = (f"mean skew {mean}, max skew { {m: max(r['skew']) for m, r in result.items()} }, job completion "
                f"{job}, marks { {m: [s['marks'] for s in r['stats']] for m, r in result.items()} }")
    print(headline)
    record_property("innet", {"kind": "scenario", "name": "symphony", "seed": seed(), "headline": headline,
                              "files": [OUT / "symphony.csv", OUT / "symphony.png"]})
    assert all(s["completion"] is not None for r in result.values() for s in r["stats"]), "a flow never finished"
    assert mean["throttle"] < mean["none"], mean


pytestmark = pytest.mark.xdist_group("scenario_symphony")
