"""``make sim``'s demonstrations (``demos/``, ``tools/sim.py``): each runs through the CLI's own path and
tells its story, and the story's numbers are derived again here from what the run left, independently of
the story's code: its counters (the testbench checked them against the golden model's) and its pcaps.

The demonstrations run without a waveform (``WAVES=0``) at their blocks' testbench parameters, so they
share the testbenches' Verilator builds (each in its testbench's xdist group); Spillway's, with its own
parameters and its waveform, is ``make sim`` itself, run and checked by ``test_readme`` (``check_story``).
"""
import collections
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapReader

import demos
import registry
from demos import NAMES
from models import wire
from models.aggregator import AggregatorModel
from models.bounded_loss_tracker import need_of
from models.contract import Packet
from models.headers import BTH, DBLP, INA, ImmDt, Spill
from tools import sim

#: Each demonstration (but Spillway's, run by test_readme) in the xdist group of the build it shares.
GROUPS = {"symphony": "progress_regfile-default", "esa": "aggregator-esa", "mrc": "ev_selector-default",
          "dblp": "bounded_loss_tracker-default", "sdr": "chunk_bitmap-default"}


def run(name, monkeypatch, capsys):
    """``python -m tools.sim name`` in this process without a waveform; its output."""
    monkeypatch.setenv("WAVES", "0")
    monkeypatch.delenv("INNET_REPLAY", raising=False)
    sim.main([name])
    return capsys.readouterr().out


def unwrap(text):
    """The lines of ``text`` with a story's wrapped lines joined whole (a continuation is indented deeper
    than a label)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("     ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def summaries(text, root=registry.ROOT):
    """The summaries of the runs a story names (its ``log`` lines), in order."""
    return [json.loads((root / path).with_name("summary.json").read_text())
            for path in re.findall(r"^  log +(\S+)$", text, re.M)]


def frames(summary, name):
    """``[(waveform cycle, bytes)]`` of pcap ``name`` of a run (pcap times are simulation ns)."""
    path = Path(summary["dir"]) / f"{name}.pcap"
    with RawPcapReader(str(path)) as reader:
        return [((meta.sec * 10**9 + meta.usec) // 2 - 1, bytes(data)) for data, meta in reader]


def says(text, *fragments):
    """Every fragment is in the story (its lines unwrapped)."""
    flat = " ".join(text.split())
    missing = [f for f in fragments if f not in flat]
    assert not missing, f"the story does not say {missing}:\n{text}"


def spillway(text, runs):
    """Counts from the spill link's pcaps; the tail-drop baseline and the latencies from the host pcaps."""
    from demos.spillway import PARAMS, SERVICE
    (s,) = runs
    c = s["counters"]
    ins, outs = frames(s, "in"), frames(s, "out")
    down = [(at, Ether(raw)[Spill]) for at, raw in frames(s, "spill_o")]
    data = [(at, bytes(h.payload)) for at, h in down if h.op == wire.SPILL_DATA]
    drains = [at for at, h in down if h.op == wire.SPILL_DRAIN]
    returns = [raw for _, raw in frames(s, "spill_i") if Ether(raw)[Spill].op == wire.SPILL_RETURN]
    assert len(data) == c["spilled"] and len(drains) == c["drain_requests"] and len(returns) == c["reinjected"]
    assert len(outs) == len(ins) == c["forwarded"] + c["reinjected"] and c["spill_overflow"] == 0
    spilled = {raw for _, raw in data}
    came = {raw: at for at, raw in ins}
    delay = {True: [], False: []}
    for at, raw in outs:
        delay[raw in spilled].append(at - came[raw])
    peak = s["demo"]["peak"]
    queue, dropped, arrivals = 0, 0, collections.Counter(came.values())
    for now in range(min(came.values()), max(came.values()) + 1):
        queue = max(queue - (now % SERVICE == 0), 0)
        for _ in range(arrivals[now]):
            queue, dropped = (queue + 1, dropped) if queue < peak else (queue, dropped + 1)
    mean = {k: sum(v) / len(v) for k, v in delay.items()}
    says(text, f"{len(ins)} RoCEv2 packets", f"{c['spilled']} spilled whole to the spill node",
         f"{c['drain_requests']} asked back once the queue fell to {PARAMS.switch.low}",
         f"{c['reinjected']} re-injected in flow order; {c['forwarded']} forwarded at once; lost 0",
         f"the same {peak}-packet queue and the same arrivals: {dropped} of the {len(ins)} dropped",
         f"spilled packets took {mean[True]:.0f} cycles from in to out on average (at most {max(delay[True])}), "
         f"forwarded ones {mean[False]:.0f}", f"first spill at cycle {data[0][0]}",
         f"first drain at cycle {drains[0]}", f"first back at cycle {next(at for at, raw in outs if raw in spilled)}",
         f"spill_o.pcap {len(down)} (switch to node", f"spill_i.pcap {len(returns)} (node to switch")
    assert dropped > 0, "the baseline loses packets where Spillway loses none"


def symphony(text, runs):
    """Marks per flow from the packets out; nothing marked once the laggard is level."""
    from demos.symphony import CHUNK, DELTA, LAGGARD, QP, TOGETHER
    (s,) = runs
    c = s["counters"]
    outs = [Ether(raw) for _, raw in frames(s, "out")]
    marked = [p[BTH].dqpn - QP for p in outs if p[IP].tos & 3 == wire.ECN_CE]
    per = collections.Counter(marked)
    level = sum(p[IP].tos & 3 == wire.ECN_CE for p in outs[-TOGETHER * 4 * CHUNK:])
    assert len(marked) == c["marked"] > 0 and per[LAGGARD] == 0 and level == 0
    flows = "; ".join(f"flow {f}: {per[f]}" for f in range(4))
    says(text, f"{c['marked']} packets marked CE while their flow was more than {DELTA} step ahead of flow "
               f"{LAGGARD} ({flows}); once it was level again 0 marked ({len(outs)} tracked)",
         f"{len(outs)} RoCEv2 packets")
    assert c["tracked"] == len(outs)


def esa(text, runs):
    """The eviction packet's sum from the contributions in; ATP's outcome from its model on the same packets."""
    from demos.esa import JOBS, PARAMS
    (s,) = runs
    c = s["counters"]
    ins = [Ether(raw)[INA] for _, raw in frames(s, "in")]
    outs = [Ether(raw)[INA] for _, raw in frames(s, "out")]
    a = [h for h in ins if h.jobseq == JOBS["A"][0]]
    (ev,) = [h for h in outs if h.evict]
    assert ev.values == [sum(col) for col in zip(*(h.values for h in a[:3]))] and ev.bitmap == 0b111
    atp = AggregatorModel(dataclasses.replace(PARAMS, policy="atp"))
    made = [Ether(o.data)[INA] for _, raw in frames(s, "in")
            for o in atp.process("i", Packet(raw, {"port": 1 + Ether(raw)[INA].bitmap.bit_length() - 1}))["o"]]
    b_alone = sum(h.jobseq == JOBS["B"][0] and bin(h.bitmap).count("1") == 1 for h in made)
    assert c["preempted"] == 1 and c["collision"] == 1 and c["completed"] == 1
    says(text, f"B preempted the slot ({c['preempted']} preemption)", f"bitmap {ev.bitmap:#x}, values "
               f"{', '.join(map(str, ev.values[:3]))}, ...", f"A's worker 3 collided ({c['collision']})",
         f"B's {b_alone} contributions collide and reach the PS one by one ({b_alone} unaggregated); {len(made)} "
         f"packets to the PS against ESA's {len(outs)}", f"{len(ins)} contributions")


def mrc(text, runs):
    """Round-robin shares from the selector's parameters and counters; the forwarder's rewrites from its pcaps."""
    from demos.mrc import AFTER, BEFORE, FORWARDER, HOST_PORT, SELECTOR, TRIMS
    selector, forwarder = runs
    c, k = selector["counters"], forwarder["counters"]
    share = BEFORE // SELECTOR.n_ev             # round robin over every slot
    assert c["demoted"] == c["refilled"] == c["probe_restored"] == 1 and c["selected"] == BEFORE + AFTER
    says(text, f"({c['demoted']} demoted)", f"({c['refilled']} refilled), which carried {share} of the next "
               f"{AFTER} packets, the lossy EV 0 (it had carried {share} of {BEFORE})", f"({c['probe_restored']} "
               f"restored)", f"static spraying (no EV state) keeps it: {share} of the {AFTER} packets")
    ins = [Ether(raw) for _, raw in frames(forwarder, "in")]
    outs = [Ether(raw) for _, raw in frames(forwarder, "out")]
    (transit, local), trims = outs[:2], outs[2:]
    assert len(bytes(local)) == len(bytes(ins[1])) - wire.IPV6_BYTES and len(trims) == k["trimmed"] == TRIMS
    assert all(len(bytes(t)) == FORWARDER.trim_len and t[IPv6].tc >> 2 == wire.DSCP_TRIM for t in trims)
    says(text, f"DA {ins[0][IPv6].dst} to {transit[IPv6].dst}, hop limit {ins[0][IPv6].hlim} to "
               f"{transit[IPv6].hlim};", f"{len(bytes(ins[1]))} to {len(bytes(local))} bytes, on port {HOST_PORT} "
               f"({k['forwarded']} forwarded, {k['decapsulated']} of them decapsulated); {k['trimmed']} trimmed: "
               f"{min(len(bytes(p)) for p in ins[2:])}-{max(len(bytes(p)) for p in ins[2:])} bytes cut to "
               f"{FORWARDER.trim_len}, DSCP {wire.DSCP_TRIM}")


def dblp(text, runs):
    """Losses and retransmissions per round from the packets in; the closes from the counters."""
    from demos.dblp import BURSTS, CNT, TAU
    (s,) = runs
    c = s["counters"]
    shims = [Ether(raw)[DBLP] for _, raw in frames(s, "in")]
    lost, resent, final = {}, {}, {}
    for r in BURSTS:
        mine = [h for h in shims if h.round == r]
        lost[r] = CNT - sum(not h.retx for h in mine)
        resent[r] = sum(h.retx for h in mine)
        final[r] = CNT - len({h.idx for h in mine})
    (ra, rb), need = BURSTS, need_of(CNT, TAU)
    assert resent[ra] == 0 and CNT - lost[rb] < need <= CNT - final[rb] and CNT - lost[ra] >= need
    assert c["bounded"] == 2 and c["nacks"] == 1 and c["loss_accepted"] == final[ra] + final[rb]
    assert len(frames(s, "out")) == c["forwarded"] == len(shims)
    says(text, f"a round needs {need}", f"a burst took {lost[ra]} packets of round {ra} and {lost[rb]} of round {rb}",
         f"({CNT - final[ra]} of {CNT}, {final[ra]} declared lost)", f"round {rb} ({CNT - lost[rb]} of {CNT}) was "
         f"NACKed", f"the sender resent {resent[rb]} and it closed BOUNDED", f"({final[rb]} lost)",
         f"{c['bounded']} bounded, {c['nacks']} NACK, {c['loss_accepted']} packets lost within the bound")


def sdr(text, runs):
    """The chunks' completion order from the order of the writes in; the late copy from the last one."""
    from demos.sdr import CHUNK, PARAMS
    (s,) = runs
    c = s["counters"]
    offsets = [(Ether(raw)[ImmDt].imm >> PARAMS.user_bits) & ((1 << PARAMS.offset_bits) - 1)
               for _, raw in frames(s, "in")]
    *message, late = offsets
    seen, order = set(), []
    for o in message:
        seen.add(o)
        chunk = o // CHUNK
        if set(range(chunk * CHUNK, (chunk + 1) * CHUNK)) <= seen and chunk not in order:
            order.append(chunk)
    assert order != sorted(order) and c["placed"] == len(message) and c["gen_mismatch"] == 1 and c["msg_done"] == 1
    says(text, f"{c['placed']} placed; chunks done in the order {order[0]} (cycle", f"a late copy of offset {late} ",
         f"({c['gen_mismatch']} gen_mismatch)", f"out of order (offsets {', '.join(map(str, message[:12]))}, ...)")
    assert [int(n) for n in re.findall(r"(\d+) \(cycle \d+\)", " ".join(text.split()))] == order


CHECKS = {"spillway": spillway, "symphony": symphony, "esa": esa, "mrc": mrc, "dblp": dblp, "sdr": sdr}


def check_story(name, text, root=registry.ROOT):
    """The story ``text`` of demonstration ``name`` (a ``make sim`` run's output under ``root``) says what
    its run left; the seed line, the runs' checked lines and the replay line are there."""
    runs = summaries(text, root)
    seed = re.search(r"^innet: traffic seed (\d+) ", text, re.M).group(1)
    assert all(str(r["seed"]) == seed for r in runs) and runs, text
    assert text.rstrip().endswith(f"replay: INNET_SEED={seed} make sim BLOCK={name}"), text
    assert sum(re.match(r"  checked .*counters equal$", line) is not None for line in unwrap(text)) == len(runs), text
    CHECKS[name](text, runs)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(g)) for n, g in GROUPS.items()])
def test_demonstration(name, monkeypatch, capsys):
    check_story(name, run(name, monkeypatch, capsys))


@pytest.mark.xdist_group(GROUPS["sdr"])
def test_replay_tells_the_same_story(monkeypatch, capsys):
    """The replay line's seed replays the demonstration: the same story (SDR's order of writes is drawn)."""
    monkeypatch.setenv("INNET_SEED", "20250613")
    first = run("sdr", monkeypatch, capsys)
    assert run("sdr", monkeypatch, capsys) == first and "INNET_SEED=20250613 make sim BLOCK=sdr" in first


def test_every_demonstration_is_checked():
    assert set(CHECKS) == set(NAMES) == set(GROUPS) | {"spillway"}


def test_list_names_the_registered_blocks():
    out = subprocess.run([sys.executable, "-m", "tools.sim", "list"], cwd=registry.ROOT, capture_output=True, text=True,
                         timeout=120).stdout
    rows = [line.split(None, 1) for line in out.splitlines()]
    assert [r[0] for r in rows] == list(NAMES), out
    for name, rest in rows:
        blocks = {r.block for r in demos.load(name).RUNS}
        assert blocks <= set(registry.BLOCKS) and all(b in rest for b in blocks), (name, rest)


def test_unknown_demonstration_is_one_line():
    result = subprocess.run([sys.executable, "-m", "tools.sim", "spill"], cwd=registry.ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0 and result.stderr.splitlines() == [
        "sim: unknown demonstration 'spill'; known: spillway, symphony, esa, mrc, dblp, sdr (or list)"], result.stderr
