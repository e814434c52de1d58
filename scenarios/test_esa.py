"""ESA scenario: several jobs of different priority share a small aggregator pool.

The closed-loop harness of ``tools/agg_measure.py`` (workers with a window of outstanding rounds
and retransmission timeouts, a parameter server that sums the pieces it receives and ACKs
completed rounds, link latencies) runs the same multi-job trace under ATP, SwitchML and ESA on
the golden model. Every packet the switch takes, at the cycle it takes it, is replayed on the
``Aggregator`` RTL of that policy under Verilator and each output packet is compared with the
model's. Output: ``build/scenarios/esa.csv`` (per policy and job) and ``.png``.
"""
import json
import os

import cocotb
import pytest

from hdl.aggregator import POLICIES, Aggregator
from hdl.packet import beat_layout
from models.packet import beats_of
from scenarios.common import figure, replay, write_csv
from testbenches import runner, tb
from tools.agg_measure import simulate

PARAMS = dict(slots=4, workers=4, values=2, data_bytes=64)
TRACE = dict(jobs=4, rounds=20, window=3, latency=20, jitter=8, timeout=400, ps_cost=6)


def seed():
    return int(os.environ.get("INNET_SEED") or 1)


def run(policy):
    """The closed loop under ``policy``: (per-job completion, stats, recorded RTL cycles)."""
    trace = []
    finish, stats = simulate(policy, seed(), slots=PARAMS["slots"], workers=PARAMS["workers"],
                             values=PARAMS["values"], trace=trace, **TRACE)
    layout, width = beat_layout(PARAMS["data_bytes"]), PARAMS["data_bytes"]
    taken = {cycle: (raw, outputs) for cycle, raw, outputs in trace}
    record, previous = [], []
    for cycle in range(trace[-1][0] + 2):
        raw, outputs = taken.get(cycle, (None, []))
        inputs = {"i__valid": int(raw is not None), "o__ready": 1,
                  "i__payload": tb.pack(layout, beats_of(raw, {"port": 1}, width)[0]) if raw else 0}
        expected = {"o__valid": len(previous)}
        if previous:
            (out, meta), = previous
            expected["o__payload"] = tb.pack(layout, beats_of(out, meta, width)[0])
        if raw is not None:
            expected["i__ready"] = 1
        record.append((inputs, expected))
        previous = outputs
    return finish, stats, record


@cocotb.test()
async def esa(dut):
    """The policy's closed loop, replayed on its RTL cycle by cycle."""
    policy = tb.params()["policy"]
    finish, stats, record = run(policy)
    await replay(dut, record, f"aggregator {policy}")
    cocotb.log.info("%s: %d cycles replayed on the RTL; completion %s", policy, len(record), finish)
    (tb.run_dir() / "result.json").write_text(json.dumps({"finish": finish, "stats": stats}))


def test_esa():
    """Average job completion and slot utilisation, ATP vs SwitchML vs ESA."""
    results = {}
    for policy in POLICIES:
        test_dir = runner.run(Aggregator, dict(PARAMS, policy=policy), "scenarios.test_esa", "esa",
                              block="scenario_esa")
        results[policy] = json.loads((test_dir / "result.json").read_text())
    rows = []
    for policy, r in results.items():
        finish, stats = r["finish"], r["stats"]
        mean = sum(finish.values()) / len(finish)
        for job in sorted(finish, key=int):
            rows.append((policy, job, job, finish[job], round(mean, 1), round(stats["held"], 3),
                         round(stats["aggregating"], 3), stats["collision"], stats["preempted"]))
    write_csv("esa", ["policy", "job", "priority", "completion", "mean_completion", "slots_held",
                      "slots_aggregating", "collisions", "preemptions"], rows)
    jobs = TRACE["jobs"]
    with figure("esa", cols=2) as (bars, usage):
        for offset, (policy, r) in enumerate(results.items()):
            bars.bar([j + 0.27 * offset for j in range(jobs)], [r["finish"][str(j)] for j in range(jobs)],
                     width=0.27, label=policy)
            usage.bar([offset - 0.2, offset + 0.2], [r["stats"]["held"], r["stats"]["aggregating"]],
                      width=0.4, color=["tab:blue", "tab:orange"])
        bars.set_xticks([j + 0.27 for j in range(jobs)], [f"job {j} (prio {j})" for j in range(jobs)])
        bars.set(ylabel="completion cycle", title="job completion")
        bars.legend()
        usage.set_xticks(range(len(results)), list(results))
        usage.set(ylabel="fraction of slot-cycles", title="slots held (left) / aggregating (right)")
    mean = {p: sum(r["finish"].values()) / len(r["finish"]) for p, r in results.items()}
    print(f"mean completion {mean}, "
          f"held { {p: round(r['stats']['held'], 3) for p, r in results.items()} }, "
          f"collisions { {p: r['stats']['collision'] for p, r in results.items()} }")
    assert all(len(r["finish"]) == jobs for r in results.values()), "a job never completed"
    assert mean["esa"] <= mean["atp"], mean


pytestmark = pytest.mark.xdist_group("scenario_esa")
