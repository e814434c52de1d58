"""MRC scenario: EV selection and SRv6 uSID forwarding on a two-plane fabric (the paper's Figs 12-14).

The closed loop of ``scenarios/mrc_fabric.py`` runs with the RTL under Verilator in it: QP 0's
``EvSelector``, the ``EvExpander`` and the ``UsidForwarder`` (leaf 0) in one wrapper, every answer
(selection every cycle, every DA, every forwarding verdict, port, queue and output header bytes)
checked by the lockstep of each block against its golden model fed what the RTL took. Three runs:

(a) 20 % drop injected on one EV of 16: that EV is demoted at its first loss event, a backup of the
    same plane replaces it, goodput stays at the offered 1 packet/cycle;
(b) two QPs (0.5 packet/cycle each) with every plane-0 EV forced onto one uplink: ECN echoes put
    the collided EVs in SKIP, which moves traffic off the uplink; against the same run with the
    echoes ignored (golden models only): fewer trims, goodput restored;
(c) uplinks failed one by one (4 of 8): goodput about constant, against single-path ECMP (one
    uplink's rate, nothing during reconvergence).

The runs on the golden models alone, their CSV and plots: ``python -m scenarios mrc``.
"""
import json

import cocotb
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from cocotb.triggers import RisingEdge

from hdl.ev_expander import EvExpander, config_layout
from hdl.ev_selector import KIND, EvSelector, request_layout
from hdl.usid_forwarder import HDR_BYTES, UsidForwarder, descriptor_layout, route_layout
from models.ev_expander import EvExpanderParams
from models.ev_selector import EvSelectorParams
from models.usid_forwarder import UsidForwarderParams
from registry import BLOCKS
from scenarios.mrc import CYCLES, DROP, DROP_EV, FAILURES, ecmp
from scenarios.mrc_fabric import (
    EXP,
    FWD,
    LOC,
    PATHS,
    PROFILE,
    SEL,
    SPINE,
    SPINES,
    Fabric,
    ModelEngine,
    path_of,
)
from testbenches import runner, tb
from testbenches.lockstep import Lockstep


class MrcTop(wiring.Component):
    """QP 0's EV selector, the EV expander and the leaf-0 uSID forwarder side by side (scenario top)."""

    def __init__(self, sel, exp, fwd):
        self.sel_p, self.exp_p, self.fwd_p = (EvSelectorParams.from_dict(sel), EvExpanderParams.from_dict(exp),
                                              UsidForwarderParams.from_dict(fwd))
        self.sel, self.exp, self.fwd = EvSelector(self.sel_p), EvExpander(self.exp_p), UsidForwarder(self.fwd_p)
        blocks = (("sel", self.sel), ("exp", self.exp), ("fwd", self.fwd))
        super().__init__({f"{name}_{port}": member for name, block in blocks
                          for port, member in block.signature.members.items() if port in ("i", "o", "cfg")})

    def elaborate(self, platform):
        m = Module()
        for name in ("sel", "exp", "fwd"):
            block = getattr(self, name)
            m.submodules[name] = block
            for port in ("i", "o", "cfg"):
                if port in block.signature.members:
                    outer = getattr(self, f"{name}_{port}")
                    inner = getattr(block, port)
                    if block.signature.members[port].flow == In:
                        wiring.connect(m, wiring.flipped(outer), inner)
                    else:
                        wiring.connect(m, inner, wiring.flipped(outer))
        return m


class RtlEngine(ModelEngine):
    """Drives the RTL each cycle with the loop's inputs; the loop goes on with the golden models' answers
    (``ModelEngine``), and the one lockstep per block (``locksteps``, following the wrapper's submodules)
    checks every RTL answer against the block's own golden model, fed what the RTL took."""

    def __init__(self, dut):
        super().__init__()
        self.dut = dut
        self.req, self.desc = request_layout(SEL), descriptor_layout(FWD)
        self.cycles = 0

    async def start(self):
        dut = self.dut
        for port in ("sel_i", "exp_i", "fwd_i", "exp_cfg", "fwd_cfg"):
            getattr(dut, f"{port}__valid").value = 0
        for port in ("sel_o", "exp_o", "fwd_o"):
            getattr(dut, f"{port}__ready").value = 1
        await tb.reset(dut, 3)
        dut.exp_cfg__valid.value = 1                       # the whole profile: held until taken
        dut.exp_cfg__payload.value = tb.pack(config_layout(EXP), PROFILE)
        await RisingEdge(dut.clk)
        while not dut.exp_cfg__ready.value:
            await RisingEdge(dut.clk)
        dut.exp_cfg__valid.value = 0
        writes = [("fwd_cfg", route_layout(FWD), {"index": k, "valid": 1, "key": LOC << 16 | SPINE | k, "port": k})
                   for k in range(PATHS)]
        for port, layout, value in writes:
            getattr(dut, f"{port}__valid").value = 1
            getattr(dut, f"{port}__payload").value = tb.pack(layout, value)
            await RisingEdge(dut.clk)
            getattr(dut, f"{port}__valid").value = 0

    async def step(self, want, event, ev, packet):
        sel, da, out = self.cycle(want, event, ev, packet)
        dut = self.dut
        encoded = {"valid": 0} if event is None else {
            "valid": 1, "kind": KIND[event["kind"]], **{k: int(v) for k, v in event.items() if k != "kind"}}
        dut.sel_i__valid.value = 1
        dut.sel_i__payload.value = tb.pack(self.req, {"want": int(want), "event": encoded})
        dut.exp_i__valid.value = int(ev is not None)
        dut.exp_i__payload.value = ev or 0
        dut.fwd_i__valid.value = int(packet is not None)
        if packet is not None:
            raw, port, data_depth, prio_depth = packet
            dut.fwd_i__payload.value = tb.pack(self.desc, {
                "hdr": int.from_bytes(raw[:HDR_BYTES], "little"), "length": len(raw),
                "port": port, "data_depth": data_depth, "prio_depth": prio_depth})
        await RisingEdge(dut.clk)
        self.cycles += 1
        return sel, da, out


def locksteps(dut):
    """The lockstep of each block of ``MrcTop`` beside its submodule, from the first cycle after each reset."""
    out = []
    blocks = (("sel", "ev_selector", SEL), ("exp", "ev_expander", EXP), ("fwd", "usid_forwarder", FWD))
    for scope, name, params in blocks:
        b = BLOCKS[name]
        ls = Lockstep(b.interface(params), b.model(params))
        cocotb.start_soon(tb.follow(getattr(dut, scope), ls, dut.clk, lambda: bool(dut.rst.value)))
        out.append(ls)
    return out


def fabrics(seed):
    """The three runs' loops (the same seed each)."""
    return {"drop": Fabric(seed, drop_ev=DROP_EV, drop=DROP),
            "collide": Fabric(seed, qps=2, rate_cycles=2, collide=0),
            "fail": Fabric(seed, failures=FAILURES)}


def summary(name, fabric):
    return {"samples": [[t, g, {f"{q}:{p}": n for (q, p), n in paths.items()}, depths]
                        for t, g, paths, depths in fabric.samples],
            "stats": dict(fabric.stats), "demoted_at": fabric.demoted_at, "bad_losses": fabric.bad_losses,
            "first_bad_loss": fabric.first_bad_loss, "replacement": fabric.replacement}


@cocotb.test()
async def mrc(dut):
    """The three runs with the RTL in the loop, every answer checked against the models (the lockstep)."""
    tb.start_clock(dut)
    checking = locksteps(dut)
    results = {}
    for name, fabric in fabrics(tb.seed()).items():
        engine = RtlEngine(dut)
        await engine.start()
        for _ in range(CYCLES[name]):
            inputs = fabric.begin(engine)
            fabric.end(engine, *await engine.step(*inputs))
        for _ in range(4):                          # the last answers leave (latency 1)
            dut.sel_i__valid.value = dut.exp_i__valid.value = dut.fwd_i__valid.value = 0
            await RisingEdge(dut.clk)
        for ls in checking:
            ls.done()
        results[name] = summary(name, fabric)
        cocotb.log.info("%s: %d cycles, RTL answers equal the models; %s", name, engine.cycles, fabric.stats)
    (tb.run_dir() / "result.json").write_text(json.dumps(results))


def mean(values):
    return sum(values) / len(values) if values else 0.0


def test_mrc(record_property):
    seed = runner.traffic_seed(default=1)
    params = {"sel": SEL.as_dict(), "exp": EXP.as_dict(), "fwd": FWD.as_dict()}
    run = runner.run(MrcTop, params, "scenarios.test_mrc", "mrc", block="scenario_mrc", seed=seed)
    r = json.loads((run / "result.json").read_text())
    # reference runs on the golden models: (b) with the ECN echoes ignored
    ignore = Fabric(seed, qps=2, rate_cycles=2, collide=0, react_ecn=False)
    ignore.run(ModelEngine(), CYCLES["collide"])
    r["ignore"] = summary("ignore", ignore)
    clean = Fabric(seed)                                    # (a) without the injected drop
    clean.run(ModelEngine(), CYCLES["drop"])
    r["no_drop"] = summary("no_drop", clean)

    def goodput(name, skip=1):
        return [g for _, g, _, _ in r[name]["samples"][skip:]]

    # (a) demotion at the first loss event of the bad EV, same-plane replacement, goodput held
    a = r["drop"]
    assert a["bad_losses"] == 1 and a["demoted_at"] is not None, f"demoted after {a['bad_losses']} loss events"
    assert a["replacement"] is not None and path_of(a["replacement"]) // SPINES == path_of(DROP_EV) // SPINES, (
        "the replacement comes from the same plane")
    assert min(goodput("drop")) >= 0.95 and mean(goodput("drop")) >= 0.99 * mean(goodput("no_drop")), (
        goodput("drop"), goodput("no_drop"))
    # (b) ECN skip moves traffic off the collided uplink
    share = {}
    for name in ("collide", "ignore"):
        late = r[name]["samples"][len(r[name]["samples"]) // 2:]
        share[name] = mean([sum(n for k, n in paths.items() if k.endswith(":0")) / max(sum(paths.values()), 1)
                            for _, _, paths, _ in late])
    trims = {name: r[name]["stats"].get("trimmed", 0) for name in ("collide", "ignore")}
    queue = {name: mean([depths[0] for _, _, _, depths in r[name]["samples"][5:]]) for name in ("collide", "ignore")}
    assert share["collide"] <= share["ignore"] and trims["collide"] < trims["ignore"], (share, trims)
    assert queue["collide"] < queue["ignore"], queue
    assert mean(goodput("collide", 5)) > mean(goodput("ignore", 5)) and mean(goodput("collide", 5)) >= 0.95
    # (c) goodput about constant through the failures, against single-path ECMP
    window = CYCLES["fail"] // len(r["fail"]["samples"])
    base = ecmp(CYCLES["fail"], window)
    fail = goodput("fail")
    assert min(fail) >= 0.8 and mean(fail) >= 0.95 and mean(fail) > 2 * mean(base[1:]), (fail, base)

    headline = (f"(a) demoted at {a['demoted_at']}; (b) queue {queue['ignore']:.1f} -> {queue['collide']:.1f}; "
                f"(c) goodput {mean(fail):.2f} vs ECMP {mean(base[1:]):.2f}")
    print(headline)
    record_property("innet", run)


pytestmark = pytest.mark.xdist_group("scenario_mrc")
