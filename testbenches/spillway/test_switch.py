"""Spillway's switch side alone under Verilator (``SpillSwitch``), in lockstep with its golden model every
cycle; beyond its spill link the spill node and the two links are played by their golden models
(``SpillNodeModel``, ``DelayLineModel``), so that bogus frames can be put on the return link. The end-to-end
checks are ``testbenches/spillway/traffic.py``'s; the credit core alone in Amaranth's simulator."""
import collections
import itertools
import os
import random

import cocotb
import pytest
from amaranth.sim import Simulator
from cocotb.triggers import RisingEdge

from hdl.spillway.credit import CreditCore
from hdl.spillway.switch import SpillSwitch
from models import wire
from models.headers import Ether, Raw, spill_frame
from models.spillway.credit import CREDIT_COUNTERS, SPILL, CreditCoreModel
from models.spillway.params import SpillSwitchParams
from testbenches import runner, tb
from testbenches.spillway import traffic
from testbenches.spillway.far_end import FarEnd
from testbenches.spillway.traffic import SpillwayTB, flows, packet, sizes

ARP_ETHERTYPE = 0x0806


class TB(SpillwayTB):
    """The switch's packets in and out and the egress queues; the node and both links as golden models
    (``FarEnd``: ``latency`` cycles each way), which can put bogus frames on the return link."""

    name = "spillway.switch"

    def __init__(self, dut, service=4, latency=7):
        self.switch_params, self.latency = tb.params(), latency
        self.switch = dut
        super().__init__(dut, service)
        self.switch_model = self.model
        self.far = FarEnd(self, self.switch_params, latency)

    async def reset(self):
        await super().reset()
        self.far.reset()

    def node_state(self):
        return self.far.node.stored, self.far.node.counters()

    def quiet(self):
        return super().quiet() and self.far.quiet()

    def check(self, name):
        super().check(name, bogus=self.far.bogus)


@cocotb.test()
async def random_traffic(dut):
    """Random flows and sizes, cross traffic, back-pressure on o and both links; the shortest packets spilled."""
    await traffic.random_traffic(TB(dut))


@cocotb.test()
async def bad_input(dut):
    """Malformed packets on i (not UDP, runt, longer than the ingress FIFO), oversize spills, and bogus
    frames on the return link (EtherType, op, port, runt, not requested): dropped and counted."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    t.sink.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    await t.reset()
    fl = flows(rng, 6, t.ports)
    P, W, p = t.ports, t.W, t.switch_params
    for n in range(160):
        if n % 30 == 0:
            t.load = [p.high + 2 if rng.random() < 0.6 else 0 for _ in range(P)]
        flow = rng.choice(fl)
        kind = rng.random()
        if kind < 0.6:
            t.send(packet(flow, n, rng.choice(sizes(t))), flow[4])
        elif kind < 0.7:
            t.send(bytes(packet(flow, n))[:rng.randrange(1, wire.UDP_HEADER_END)], flow[4])    # runt
        elif kind < 0.76:
            t.send(Ether(type=ARP_ETHERTYPE) / Raw(bytes(50 + n)), flow[4])
        elif kind < 0.82:
            t.send(packet(flow, n, p.buffer * W), flow[4])                                    # giant
        elif kind < 0.9:
            t.send(packet(flow, n, p.mtu), flow[4])                                           # > mtu
        else:
            t.send(packet(flow, n, 10), P + rng.randrange(3))                                 # no such port
        if rng.random() < 0.1:
            inner = bytes(packet(flow, 1000 + n, 8))
            good = bytes(spill_frame(inner, port=0, op=wire.SPILL_RETURN))
            unasked = lambda idle, inner=inner: bytes(  # noqa: E731
                spill_frame(inner, port=idle[0] if idle else P, op=wire.SPILL_RETURN))
            t.far.inject(rng.choice([
                good[:12] + b"\x08\x00" + good[14:],                                           # EtherType
                bytes(spill_frame(inner, port=0, op=wire.SPILL_DATA)),                          # op
                bytes(spill_frame(inner, port=P + rng.randrange(3), op=wire.SPILL_RETURN)),    # port
                good[:rng.randrange(1, wire.SPILL_HEADER_BYTES + 1)],                           # runt
                unasked,                                                                        # not asked
            ]))
        if n % 8 == 7:
            while len(t.source.queue) > 16:
                await RisingEdge(dut.clk)
    await t.settle()
    c = t.model.counters()
    assert c["malformed"] > 10 and c["spill_oversize"] > 0 and t.far.bogus > 5, (c, t.far.bogus)
    t.check("bad_input")


@cocotb.test()
async def node_full(dut):
    """The node fills to its capacity, further spills are dropped by the switch; everything drains."""
    await traffic.node_full(TB(dut))


@cocotb.test()
async def line_rate(dut):
    """Uncongested multi-beat packets back to back: one beat per cycle in and out."""
    await traffic.line_rate(TB(dut, service=1))


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset with packets everywhere empties the switch side; traffic then resumes."""
    await traffic.reset_mid_traffic(TB(dut))


PARAMS = {
    "p3": SpillSwitchParams(ports=3, high=6, low=2, capacity=4, drain_rate=1, drain_window=3, flows=8, order="flow",
                            mtu=200, buffer=12, return_slots=2, data_bytes=64, counter_bits=16),
    "p2w48": SpillSwitchParams(ports=2, high=5, low=3, capacity=6, drain_rate=2, drain_window=4, flows=4,
                               order="port", mtu=150, buffer=8, return_slots=3, data_bytes=48, counter_bits=16),
}
#: p3 runs the bad input and the random traffic (the top runs the rest end to end); p2w48 (a power-of-2
#: ingress FIFO: a giant packet fills its beat count's top bit) the bad input; INNET_SPILLWAY_ALL=1 runs
#: everything on both.
SELECT = None if os.environ.get("INNET_SPILLWAY_ALL") else (
    lambda config, test: test == "bad_input" or (config == "p3" and test == "random_traffic"))


@runner.parametrize(__name__, PARAMS, SELECT)
def test_switch(params, testcase, record_property):
    record_property("innet", runner.run(SpillSwitch, params, __name__, testcase))


CREDIT_PARAMS = {
    "flow": SpillSwitchParams(ports=3, high=6, low=2, capacity=4, drain_rate=1, drain_window=3, flows=8,
                              order="flow", mtu=300, return_slots=2, counter_bits=16),
    "port": SpillSwitchParams(ports=2, high=5, low=3, capacity=3, drain_rate=2, drain_window=4, flows=4,
                              order="port", mtu=200, return_slots=3, counter_bits=16),
}


@pytest.mark.parametrize("config", CREDIT_PARAMS)
def test_credit_core_matches_model(config):
    """CreditCore vs CreditCoreModel every cycle, in a closed loop: spills go to a shadow node (per-port
    FIFOs behind a link of random delay), requests come back as returns, returns are re-injected;
    random queue depths, back-pressure on v and req, bogus returns. Then order and credits."""
    params = CREDIT_PARAMS[config]
    dut, model = CreditCore(params), CreditCoreModel(params)
    rng = random.Random(runner.traffic_seed())
    P, C = params.ports, params.capacity
    node = [collections.deque() for _ in range(P)]       # (flow, seq, arrival number) at the node
    returning = []                                         # (cycle, port): frames on the way back
    held = collections.deque()                             # accepted returns waiting to be re-injected
    done_log, spilled_log = [], []

    async def bench(ctx):
        handle = 0
        for cycle in range(2500):
            phase = (cycle // 300) % 3                     # congested, mixed, calm
            qdepth = [rng.choice([[params.high, params.high + 2], [0, params.low, params.high],
                                  [0, params.low]][phase]) for _ in range(P)]
            arrival = None
            if rng.random() < 0.7:
                flow = rng.randrange(params.flows)           # a flow has one egress port
                port = P if rng.random() < 0.03 else flow % P
                arrival = {"handle": handle % (1 << params.handle_bits), "port": port, "flow": flow,
                           "length": rng.choice([60, 200, params.mtu, params.mtu + 1]),
                           "malformed": int(rng.random() < 0.05)}
            v_ready, req_ready = rng.random() < 0.85, rng.random() < 0.7
            ret = None
            if returning and returning[0][0] <= cycle:
                ret = returning.pop(0)[1]
            elif rng.random() < 0.01:
                ret = rng.randrange(P + 1)                 # a return nobody asked for
            done = None
            if held and rng.random() < 0.5:
                done = held.popleft()
            ctx.set(dut.d.valid, arrival is not None)
            if arrival is not None:
                ctx.set(dut.d.payload, arrival)
            ctx.set(dut.qdepth, qdepth)
            ctx.set(dut.v.ready, v_ready)
            ctx.set(dut.req.ready, req_ready)
            ctx.set(dut.ret_valid, ret is not None)
            ctx.set(dut.ret_port, ret or 0)
            ctx.set(dut.done_valid, done is not None)
            if done is not None:
                ctx.set(dut.done_port, done["port"])
                ctx.set(dut.done_flow, done["flow"])
                ctx.set(dut.done_seq, done["seq"])
            credits = list(model.credits)
            d_ready, verdict, req, ret_ok = model.step(arrival, qdepth, v_ready, req_ready, ret, done)
            where = f"{config} cycle {cycle}"
            assert list(ctx.get(dut.credits)) == credits, where
            if arrival is not None:
                assert ctx.get(dut.d.ready) == d_ready, where
                got = ctx.get(dut.v.payload)
                assert {k: getattr(got, k) for k in verdict} == verdict, f"{where}: {got} vs {verdict}"
            assert ctx.get(dut.req.valid) == (req is not None), where
            if req is not None:
                assert ctx.get(dut.req.payload.port) == req, where
                if req_ready:
                    returning.append((cycle + rng.randrange(2, 30), req))
                    returning.sort()
            assert ctx.get(dut.ret_ok) == ret_ok, where
            if ret_ok:
                flow, seq, number = node[ret].popleft()
                held.append({"port": ret, "flow": flow, "seq": seq})
                done_log.append((ret, flow, number))
            if verdict is not None and v_ready:
                handle += 1
                if verdict["kind"] == SPILL:
                    node[verdict["port"]].append((verdict["flow"], verdict["seq"], handle))
                    spilled_log.append(verdict["flow"])
                    assert len(node[verdict["port"]]) <= C, f"{where}: node overflow"
            await ctx.tick()
        for name in CREDIT_COUNTERS:
            assert ctx.get(getattr(dut, name)) == model.counters[name], name

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    c = model.counters
    assert c["spilled"] > 20 and c["reinjected"] > 10 and c["spill_overflow"] > 0 and c["return_malformed"] > 0, c
    assert c["misordered"] == 0
    for q in range(P):
        assert model.credits[q] + model.unasked[q] + model.asked[q] + sum(h["port"] == q for h in held) == C
    last = {}
    for port, flow, number in done_log:                    # per-flow order of re-injection
        assert number > last.get(flow, -1), f"flow {flow} reordered"
        last[flow] = number
