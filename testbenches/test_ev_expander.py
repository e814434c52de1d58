"""MRC EV expander: the golden model and the RTL (cocotb under Verilator) against OCP MRC 1.0's own
example program (``testbenches/data/ocp_ev_expansion.json``: its ten profiles and 80 expansions, recorded
by ``tools/ocp_vectors.py``), against the PDEP-style oracle on random EVs per profile, and against OCP's
refusal rules (``check_profs``, ``verify_unused_bits_zero``).
"""
import collections
import itertools
import json
import random
from pathlib import Path

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb.utils import get_sim_time

from hdl.ev_expander import EvExpander, config_cycles
from models import wire
from models.ev_expander import (
    EvExpanderModel,
    EvExpanderParams,
    bytes_of,
    ev_of_bytes,
    expand,
    profile,
    refusal,
)
from testbenches import runner, tb
from testbenches.soak_traffic import consumed, fit, random_ev, random_profile

OCP = json.loads((Path(__file__).parent / "data" / "ocp_ev_expansion.json").read_text())
MODES = {"STEV": wire.EV_FMT_MODE_STEV, "SRv6": wire.EV_FMT_MODE_SRV6}
STEV, SRV6 = wire.EV_FMT_MODE_STEV, wire.EV_FMT_MODE_SRV6
LOC = 0xFC00_0001


def ocp_profiles():
    """(name, profile payload, [(ev_t bytes, expanded ev_t bytes, field values)]) of OCP's example."""
    return [(p["name"], profile(MODES[p["fmt_type"]], p["fmt_widths"], p["fields"]),
             [(bytes.fromhex(c["ev"]), bytes.fromhex(c["exp_ev"]), c["field_values"]) for c in p["cases"]])
            for p in OCP["profiles"]]


def fld(width, init=0, mask=0, lo=0, hi=0):
    return (width, init, lo, hi, mask)


#: Parameters that hold every profile of OCP's example (the model tests' default).
OCP_SIZE = {"ev_bits": 128, "exp_bits": 256, "max_fields": 16}


def model(prof=None, **kw):
    m = EvExpanderModel(EvExpanderParams(**{**OCP_SIZE, **kw}))
    if prof is not None:
        m.process("cfg", prof)
    return m


def oracle(ev, prof, bits, out_bits):
    """The expected answer by the PDEP oracle: ``ok`` when it expands ``ev``; ``exp_ev`` the expansion of
    the consumed bits (the EV with the bits past them cleared)."""
    want = expand(ev, prof, bits, out_bits)
    used = ev & ~((1 << (bits - consumed(prof))) - 1)
    return {"ok": want is not None, "exp_ev": expand(used, prof, bits, out_bits)}


# --- the model against OCP's program and the oracle ------------------------------------------------------


def ocp_verdicts():
    """(profile, OCP accepts it, [(ev_t bytes, expanded ev_t bytes or None: refused)]) of the recorded
    edge cases (``tools/ocp_vectors.py`` ``CHECKS``)."""
    return [(profile(SRV6, c["fmt_widths"], c["fields"]), c["accepted"],
             [(bytes.fromhex(e["ev"]), e["exp_ev"] and bytes.fromhex(e["exp_ev"])) for e in c["cases"]])
            for c in OCP["check_profs"]]


# --- RTL under Verilator ------------------------------------------------------------------------------

def mask_shape(mask, width):
    """A field's mask: fixed, full width, one bit, one run of bits, or sparse."""
    if not mask:
        return "zero"
    if mask == (1 << width) - 1:
        return "full"
    if mask & (mask - 1) == 0:
        return "single"
    low = mask & -mask
    return "run" if (mask + low) & mask == 0 else "sparse"


def coverage():
    """The expander's functional coverage: per profile its mode and verdict (the refusal's rule), per field
    its mask shape and its width against its slot's, per request the outcome (SPEC 5)."""
    cover = tb.Coverage("ev_expander")
    cover.point("mode", ("STEV", "SRv6", "other"))
    cover.point("verdict", ("configured", "check_profs", "ev_fmt_mode", "ev_t", "E2BIG", "ev_max_width"))
    cover.point("mask", ("zero", "full", "single", "run", "sparse"))
    cover.point("slot", ("narrower", "equal", "wider"))                 # the format slot against its field
    cover.point("outcome", ("expanded", "bad_ev"))
    cover.point("taken", ("0", "partial", "=ev_bits"))
    cover.cross("mode_x_verdict", "mode", "verdict", unreachable={
        ("other", "configured"): "a mode other than STEV and SRv6 is refused",
        ("STEV", "ev_fmt_mode"): "STEV is a known mode", ("SRv6", "ev_fmt_mode"): "SRv6 is a known mode"})
    cover.cross("outcome_x_taken", "outcome", "taken", unreachable={
        ("bad_ev", "=ev_bits"): "every EV bit is taken: no unused bit can be set"})
    return cover


def verdict(reason):
    if reason is None:
        return "configured"
    return next(k for k in ("check_profs", "ev_fmt_mode", "ev_t", "E2BIG", "ev_max_width") if reason.startswith(k))


class Observed(EvExpanderModel):
    """The golden model the lockstep runs, with the testbench's own checks around each transfer it takes
    (in the order the RTL takes them; never both ports in one cycle): coverage of every profile and
    request, each answer against the oracle and, for a recorded case of OCP's program, against OCP's
    expansion."""

    def __init__(self, params, t):
        self.t = t
        super().__init__(params)

    def reset(self):
        super().reset()
        self.prof = profile(STEV, [], [])
        self.last = (None, None)        # the port and simulation time of the last transfer taken

    def _once_a_cycle(self, port):
        now = get_sim_time("ns")
        assert self.last[1] != now, f"a {port} transfer in the cycle of a {self.last[0]} transfer"
        self.last = (port, now)

    def process(self, port, item):
        self._once_a_cycle(port)
        made = super().process(port, item)
        t = self.t
        if port == "cfg":
            reason = refusal(item, self.params)
            mode = {STEV: "STEV", SRV6: "SRv6"}.get(item["ev_fmt_mode"], "other")
            t.cover.sample(mode=mode, verdict=verdict(reason))
            if reason is None:
                self.prof = item
                for width, f in zip(item["fmt_fields"], item["fields"][:item["field_count"]]):
                    t.cover.sample(mask=mask_shape(f["mask"], f["width"]), slot="narrower" if width < f["width"]
                                   else "equal" if width == f["width"] else "wider")
            t.profiles += 1
            return made
        out = made["o"][0]
        bits, taken = self.params.ev_bits, consumed(self.prof)
        t.cover.sample(outcome="expanded" if out["ok"] else "bad_ev",
                       taken="0" if not taken else "=ev_bits" if taken == bits else "partial")
        assert out == oracle(item["ev"], self.prof, bits, self.params.exp_bits), "model and oracle differ"
        if t.recorded:                       # a case of OCP's program: its expansion, or None: refused
            want = t.recorded.popleft()
            assert out["ok"] == (want is not None) and want in (None, out["exp_ev"]), "model and OCP differ"
        t.sent += 1
        return made


class TB(tb.BlockTB):
    """DUT + model in lockstep (``Observed``: the model with the testbench's own checks); every answer
    is compared in order by the lockstep."""

    name = "ev_expander"

    def __init__(self, dut, rng, idle=0.0, backpressure=0.0):
        self.cover = coverage()
        self.recorded = collections.deque()
        self.sent = self.received = self.profiles = 0
        super().__init__(dut, model=Observed(tb.params(), self))
        self.rng = rng
        self.source = self.stream_source("i")
        self.cfg = self.stream_source("cfg")
        self.sink = self.stream_sink("o")
        self.source.set_pause_generator(rng.random() < idle for _ in itertools.count())
        self.sink.set_pause_generator(rng.random() < backpressure for _ in itertools.count())
        cocotb.start_soon(self._consume())

    @property
    def prof(self):
        return self.model.prof

    async def reset(self, cycles=3):
        await super().reset(cycles)
        self.sent = self.received = self.profiles = 0

    def send(self, ev):
        self.source.send_nowait({"ev": ev})

    def configure(self, prof):
        """Offer a profile (requests queued meanwhile go on under the old one)."""
        self.cfg.send_nowait(prof)

    async def configured(self):
        await self.cfg.wait_idle()

    def evs(self, n):
        """``n`` random requests for the profile in force once the queued profiles are taken."""
        taken = consumed(self.cfg.queue[-1] if self.cfg.queue and refusal(self.cfg.queue[-1], self.params) is None
                         else self.prof)
        for _ in range(n):
            self.send(random_ev(self.rng, self.params.ev_bits, taken))

    async def _consume(self):
        while True:
            await self.sink.recv()
            if not self.muted:
                self.received += 1

    async def drain(self):
        waited, seen = 0, self.received
        while self.source.queue or self.cfg.queue or self.received < self.sent:
            await RisingEdge(self.dut.clk)
            waited = 0 if self.received != seen or self.cfg.queue else waited + 1
            seen = self.received
            assert waited < 200, f"no progress: {self.sent - self.received} answers missing"

    async def finish(self):
        await self.drain()
        await ReadOnly()
        self.check_done()
        c = self.check_counters()
        if self.sent < 1 << self.params.counter_bits:
            self.conserved("requests", self.sent, expanded=c["expanded"], bad_ev=c["bad_ev"])
            self.conserved("profiles", self.profiles, configured=c["configured"], refused=c["refused"])
        self.cover.write()
        return c


@cocotb.test()
async def ocp_example(dut):
    """OCP's ten profiles through ``cfg``: each one the block holds expands every case of OCP's program to
    the program's expansion (and random EVs per profile, valid and with an unused bit set, to the model's
    and the oracle's); one past the block's bounds is refused and the profile before stays. Then OCP's
    verdicts on the edge cases: the EVs of each profile OCP and the block take, refused or expanded as
    OCP does."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, backpressure=0.3)
    p = t.params
    await t.reset()
    held = 0
    for name, prof, cases in ocp_profiles():
        # what the port carries: max_fields entries (SRv6+SRH's ten past eight: refused by its counts)
        prof = dict(prof, fmt_fields=prof["fmt_fields"][:p.max_fields], fields=prof["fields"][:p.max_fields])
        t.configure(prof)
        await t.configured()
        await t.drain()
        if refusal(prof, p) is None:
            held += 1
            for raw, exp_raw, _ in cases:
                ev, want = ev_of_bytes(raw, p.ev_bits), ev_of_bytes(exp_raw, p.exp_bits)
                assert bytes_of(ev, p.ev_bits) == raw and bytes_of(want, p.exp_bits) == exp_raw, name
                t.recorded.append(want)
                t.send(ev)
            await t.drain()
            assert not t.recorded, f"{name}: {len(t.recorded)} recorded expansions not checked"
        t.evs(40)
    for prof, accepted, cases in ocp_verdicts():          # OCP's verdicts on the edge cases
        t.configure(prof)
        await t.configured()
        await t.drain()
        if accepted and refusal(prof, p) is None:
            for raw, exp_raw in cases:
                ev = ev_of_bytes(raw, p.ev_bits)
                if bytes_of(ev, p.ev_bits) == raw:       # the EV fits ev_bits
                    t.recorded.append(exp_raw and ev_of_bytes(exp_raw, p.exp_bits))
                    t.send(ev)
            await t.drain()
            assert not t.recorded
    c = await t.finish()
    assert held >= 9 and (held == 10) == (p.ev_bits >= 128 and p.exp_bits >= 192 and p.max_fields >= 10), held
    assert c["expanded"] and c["bad_ev"]


@cocotb.test()
async def refusals(dut):
    """Profiles breaking each of OCP's rules (and the block's bounds) are refused: counted, and requests
    after them are expanded under the profile before."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2, backpressure=0.3)
    p = t.params
    await t.reset()
    good = fit(profile(SRV6, [16, 16, 16], [fld(16, 0xFC00), fld(16, 0, 0xFFFF), fld(16, 0x1200, 0x00F0)]), p)
    assert refusal(good, p) is None
    bad = [profile(STEV, [16], [fld(8), fld(8)]), profile(STEV, [8, 8], [fld(16), fld(1)]),
           profile(SRV6, [64], [fld(33)]), profile(STEV, [16], [fld(4, init=0x10)]),
           profile(STEV, [16], [fld(4, mask=0x10)]), profile(STEV, [16], [fld(8, mask=0x0F, hi=0x10)]),
           profile(wire.EV_FMT_MODE_UDP, [16], [fld(16, mask=0xFFFF)]), profile(STEV, [32, 8], [fld(8)]),
           profile(SRV6, [128, 128, 1] if p.exp_bits > 255 else [p.exp_bits, 1], []),
           profile(SRV6, [16] * (p.max_fields + 1), []),
           profile(SRV6, [32, 32], [fld(32, mask=(1 << 32) - 1), fld(32, mask=(1 << 32) - 1)]),
           # the widest EV fields behind one-bit format slots: their widths sum to max_fields * field_bits
           profile(SRV6, [1] * p.max_fields, [fld(p.field_bits)] * p.max_fields)]
    bad = [b for b in bad if refusal(b, p) is not None]
    t.configure(good)
    for prof in bad:
        t.configure(prof)
        t.evs(20)
    await t.configured()
    t.evs(100)
    c = await t.finish()
    assert c["refused"] == min(len(bad), (1 << p.counter_bits) - 1) and c["configured"] >= 1


@cocotb.test()
async def random_profiles(dut):
    """Random STEV and SRv6 profiles (one in six refused) offered while requests flow: a profile takes
    effect exactly at its transfer, with idle and backpressure."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2, backpressure=0.3)
    await t.reset()
    for _ in range(30):
        t.configure(random_profile(rng, t.params, refuse=1 / 6))
        t.evs(rng.choice((5, 40, 150)))
        if rng.random() < 0.5:
            await t.configured()
    c = await t.finish()
    assert c["expanded"] and c["bad_ev"] and c["configured"]


@cocotb.test()
async def line_rate(dut):
    """One EV per cycle in, one expansion per cycle out; a profile takes its scan's cycles."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.reset()
    prof = random_profile(rng, t.params)
    start = get_sim_time("ns")
    t.configure(prof)
    await t.configured()
    took = (get_sim_time("ns") - start) // t.period_ns
    reach = prof["fmt_fields"][:prof["fmt_field_count"]]
    assert took <= config_cycles(t.params, reach) + 2, f"{took} cycles for {reach}"
    n, busy, stalls = 500, 0, 0
    t.evs(n)
    while t.received < n:
        await RisingEdge(dut.clk)
        busy += 1
        stalls += bool(dut.i__valid.value) and not dut.i__ready.value
    assert stalls == 0 and busy <= n + 3, f"{n} EVs took {busy} cycles ({stalls} stalls): not one per cycle"
    await t.finish()


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset among queued requests installs the empty profile and clears the counters."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2, backpressure=0.5)
    await t.reset()
    t.configure(random_profile(rng, t.params))
    await t.configured()
    t.evs(200)
    await t.reset_mid_traffic(60)
    t.sent = t.received = t.profiles = 0
    for ev in (0, 1, 1 << (t.params.ev_bits - 1)):
        t.send(ev)
    t.configure(random_profile(rng, t.params))
    t.evs(100)
    await t.finish()


# --- pytest ----------------------------------------------------------------------------------------

PARAMS = {
    "default": EvExpanderParams(),
    #: every profile of OCP's example: a 128-bit EV, the whole 256-bit ev_t out, 16 fields.
    "ocp": EvExpanderParams(**OCP_SIZE),
    #: a 20-bit EV, a 64-bit expansion, 4 fields of at most 16 bits, 2-bit saturating counters.
    "small": EvExpanderParams(ev_bits=20, exp_bits=64, max_fields=4, field_bits=16, counter_bits=2),
}


def runs(config, test):
    return config == "default" or test in {"ocp": ("ocp_example",), "small": ("refusals", "random_profiles")}[config]


@runner.parametrize(__name__, PARAMS, select=runs)
def test_ev_expander(params, testcase, record_property):
    record_property("innet", runner.run(EvExpander, params, __name__, testcase))
