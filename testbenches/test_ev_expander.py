"""MRC EV expander: golden model against the OCP field-expansion cases and the pdep oracle; the RTL
under Verilator against the model (and the oracle) for every request.
"""
import itertools
import os
import random
import socket

import cocotb
import pytest
from amaranth.lib import data
from cocotb.triggers import ReadOnly, RisingEdge

from hdl.ev_expander import EvExpander, config_layout
from models.ev_expander import COUNTERS, EvExpanderModel, EvExpanderParams, contract, expand, field_widths, pdep, pext
from models.headers import usid_address, usid_parts
from testbenches import runner, tb

LOC = 0xFC00_0001


@pytest.fixture
def rng():
    return runner.model_rng(os.environ.get("PYTEST_CURRENT_TEST", "ev_expander"))


def model(usids, fields, **kw):
    m = EvExpanderModel(EvExpanderParams(usids=usids, **kw))
    m.configure(fields)
    return m


def test_oracles_pdep_pext():
    assert pdep(0b101, 0xA001) == 0x8001
    assert pdep(0xFFFF, 0xFFFF) == 0xFFFF and pdep(0x1234, 0) == 0
    for mask, bits in ((0xA5A5, 0x55), (0x0F0F, 0xAB), (0x8001, 0b10)):
        assert pext(pdep(bits, mask), mask) == bits
    # expand/contract agree with each other and with a hand-computed DA.
    fields = [(LOC, 0), (0x0F00, 0xA001), (0, 0xFFFF)]
    ev = 0b101 << 29 | 0x1234 << 13
    da = expand(ev, fields)
    assert usid_parts(da) == (LOC, [0x8F01, 0x1234, 0, 0, 0, 0])
    assert contract(da, fields) == ev
    assert expand(ev | 1, fields) is None


def test_explicit_fields_copy_the_ev():
    """Explicit: a fixed locator and two full-mask uSIDs carry EV[31:16] and EV[15:0] verbatim."""
    m = model(2, [(LOC, 0), (0, 0xFFFF), (0, 0xFFFF)])
    out = m.process(0xBEEF_1234)
    assert out["ok"] and usid_parts(out["da"]) == (LOC, [0xBEEF, 0x1234, 0, 0, 0, 0])
    address = socket.inet_pton(socket.AF_INET6, usid_address(LOC, [0xBEEF, 0x1234]))
    assert out["da"] == int.from_bytes(address, "big")


def test_generated_fields_overwrite_init_under_the_mask():
    """Generated: the low bits of each uSID come from the EV, the rest from the init value."""
    m = model(3, [(LOC, 0), (0x0100, 0x000F), (0x0200, 0x0007), (0xE000, 0)])
    ev = 0b1011 << 28 | 0b110 << 25
    out = m.process(ev)
    assert usid_parts(out["da"]) == (LOC, [0x010B, 0x0206, 0xE000, 0, 0, 0])
    # init bits under the mask are overwritten, not ORed.
    m.configure([(LOC, 0), (0x010F, 0x000F), (0x0207, 0x0007), (0xE000, 0)])
    assert usid_parts(m.process(0)["da"]) == (LOC, [0x0100, 0x0200, 0xE000, 0, 0, 0])


def test_fixed_fields_and_unused_ev_bits():
    """Fixed: zero masks everywhere; only EV 0 is valid, any other EV is refused (bad_ev, no DA)."""
    m = model(2, [(LOC, 0), (0x0101, 0), (0xFFFE, 0)])
    assert m.process(0) == {"ok": True, "da": expand(0, m.fields)}
    assert usid_parts(m.process(0)["da"]) == (LOC, [0x0101, 0xFFFE, 0, 0, 0, 0])
    assert m.process(1) == {"ok": False, "da": None}
    assert m.process(1 << 31)["ok"] is False
    assert m.counters == {"expanded": 2, "bad_ev": 2}


def test_odd_masks_msb_first():
    """Odd masks: non-contiguous; the first EV bit taken lands on the mask's most significant set bit."""
    m = model(2, [(LOC, 0x0000_0101), (0x5A5A, 0xA5A5), (0, 0x8001)])
    # EV bits in order: locator takes 2 (bits 8, 0), u0 takes 8, u1 takes 2; 12 used, 20 unused.
    ev = 0b10 << 30 | 0b1100_0011 << 22 | 0b01 << 20
    out = m.process(ev)
    assert out["ok"]
    loc, us = usid_parts(out["da"])
    assert loc == (LOC & ~0x101) | 0x100
    assert us[0] == 0x5A5A | 0xA005 == 0xFA5F         # mask bits 15,13,10,8,7,5,2,0 <- 1,1,0,0,0,0,1,1
    assert us[0] == pdep(0b1100_0011, 0xA5A5) | (0x5A5A & ~0xA5A5)
    assert us[1] == 0x0001
    assert m.process(ev | 1 << 19)["ok"] is False


def test_several_usids_use_the_ev_in_order():
    """Six uSIDs, five EV bits each (30 bits): fields consume the EV MSB-first, in DA order."""
    m = model(6, [(LOC, 0)] + [(0x1000 * (i + 1), 0x001F) for i in range(6)])
    ev = 0
    for i, v in enumerate((1, 2, 3, 29, 30, 31)):
        ev |= v << (27 - 5 * i)
    out = m.process(ev)
    assert usid_parts(out["da"]) == (LOC, [0x1001, 0x2002, 0x3003, 0x401D, 0x501E, 0x601F])
    assert m.process(ev | 0b01)["ok"] is False and m.process(ev | 0b10)["ok"] is False


def test_fewer_usids_leave_the_end_of_carrier_zero():
    m = model(1, [(LOC, 0xFF), (0xABCD, 0)])
    out = m.process(0x5A << 24)
    assert usid_parts(out["da"]) == ((LOC & ~0xFF) | 0x5A, [0xABCD, 0, 0, 0, 0, 0])


def test_random_expansion_matches_oracle_and_round_trips(rng):
    for _ in range(300):
        usids = rng.randint(1, 6)
        budget = 32
        fields = []
        for width in field_widths(usids):
            mask = rng.getrandbits(width) & rng.choice((0, -1, 0xF0F0F0F0, 0x000F, (1 << width) - 1))
            while bin(mask).count("1") > budget:
                mask &= mask - 1
            budget -= bin(mask).count("1")
            fields.append((rng.getrandbits(width), mask))
        m = model(usids, fields)
        total = 32 - budget
        for _ in range(8):
            ev = rng.getrandbits(32)
            if rng.random() < 0.7 and total < 32:
                ev &= ~((1 << (32 - total)) - 1) & 0xFFFFFFFF
            out = m.process(ev)
            want = expand(ev, fields)
            assert out == {"ok": want is not None, "da": want}
            if want is not None:
                assert contract(want, fields) == ev
                loc, us = usid_parts(usid_address(*usid_parts(want)))     # the DA survives scapy
                assert (loc, us) == usid_parts(want)
        assert sum(m.counters.values()) == 8


def test_configuration_errors_and_reset():
    m = EvExpanderModel(EvExpanderParams(usids=2))
    with pytest.raises(ValueError, match="expected 3"):
        m.configure([(0, 0)])
    with pytest.raises(ValueError, match=r"fields\[1\].mask"):
        m.configure([(0, 0), (0, 1 << 16), (0, 0)])
    with pytest.raises(ValueError, match=r"fields\[0\].init"):
        m.configure([(-1, 0), (0, 0), (0, 0)])
    with pytest.raises(ValueError, match="33 EV bits"):
        m.configure([(0, 1), (0, 0xFFFF), (0, 0xFFFF)])
    with pytest.raises(ValueError, match="ev = "):
        m.process(1 << 32)
    m.configure([(LOC, 0), (0, 0xFFFF), (0, 0xFFFF)])
    m.process(5)
    m.reset()
    assert m.fields == [(0, 0)] * 3 and m.counters == dict.fromkeys(COUNTERS, 0)
    assert m.process(0) == {"ok": True, "da": 0} and m.process(1)["ok"] is False


def test_ev_bits_parameter_narrows_the_ev():
    m = model(1, [(0, 0), (0, 0x00FF)], ev_bits=8)
    assert usid_parts(m.process(0xA5)["da"])[1][0] == 0xA5
    with pytest.raises(ValueError, match="ev_bits = 8"):
        m.configure([(0, 0x1), (0, 0x00FF)])


def test_counters_saturate():
    m = model(1, [(0, 0), (0, 0)], counter_bits=2)
    for _ in range(5):
        m.process(0)
        m.process(1)
    assert m.counters == {"expanded": 3, "bad_ev": 3}


@pytest.mark.parametrize("field, value, error", [
    ("usids", 0, ValueError), ("usids", 7, ValueError), ("ev_bits", 33, ValueError),
    ("counter_bits", 0, ValueError), ("usids", "2", TypeError), ("ev_bits", True, TypeError)])
def test_bad_parameters_name_the_field(field, value, error):
    with pytest.raises(error, match=f"EvExpanderParams.{field}"):
        EvExpanderParams(**{field: value})


# --- RTL under Verilator ------------------------------------------------------------------------------

PATIENCE = 200


def mask_shape(mask, width):
    """A field's mask: fixed, full width, one bit, one run of bits (at the LSB or higher), or sparse."""
    if not mask:
        return "zero"
    if mask == (1 << width) - 1:
        return "full"
    if mask & (mask - 1) == 0:
        return "msb" if mask >> (width - 1) else "lsb" if mask == 1 else "single"
    low = mask & -mask
    if (mask + low) & mask == 0:            # one run of set bits
        return "run_lsb" if low == 1 else "run_msb" if mask >> (width - 1) else "run"
    return "sparse"


def coverage():
    """The expander's functional coverage: per field its mask shape (locator and uSIDs), per request
    the outcome against how many EV bits the fields take and where an unused bit is set (SPEC 5)."""
    cover = tb.Coverage("ev_expander")
    cover.point("field", ("locator", "usid"))
    cover.point("mask", ("zero", "full", "lsb", "msb", "single", "run_lsb", "run_msb", "run", "sparse"))
    cover.point("fields_taking", ("none", "one", "several", "all"))     # fields whose mask takes EV bits
    cover.point("taken", ("0", "partial", "=ev_bits"))                  # EV bits the masks take
    cover.point("outcome", COUNTERS)
    cover.point("unused_set", ("lowest", "highest", "other"))           # the unused EV bits set in a bad EV
    cover.point("ev", ("zero", "ones", "other"))
    cover.cross("field_x_mask", "field", "mask")
    cover.cross("outcome_x_taken", "outcome", "taken", unreachable={
        ("bad_ev", "=ev_bits"): "every EV bit is taken: no unused bit can be set"})
    return cover


class TB(tb.BlockTB):
    """DUT + model; every EV goes to both, every answer is compared in order (and with ``expand``)."""

    name = "ev_expander"

    def __init__(self, dut, rng, idle=0.0, backpressure=0.0):
        super().__init__(dut)
        p = self.params
        self.rng = rng
        self.source = tb.StreamSource(dut, "i", data.StructLayout({"ev": p.ev_bits}))
        self.sink = tb.StreamSink(dut, "o", data.StructLayout({"ok": 1, "da": 128}))
        self.cfg = tb.StreamSource(dut, "cfg", config_layout(p))
        self.source.set_pause_generator(rng.random() < idle for _ in itertools.count())
        self.sink.set_pause_generator(rng.random() < backpressure for _ in itertools.count())
        self.cover = coverage()
        self.restart()
        cocotb.start_soon(self._consume())

    def restart(self):
        self.model = EvExpanderModel(self.params)
        self.board = tb.Scoreboard("ev_expander")
        self.sent = self.received = 0

    async def configure(self, fields):
        """Between requests: the model's registers and the RTL's, one ``cfg`` write per field."""
        await self.drain()
        self.model.configure(fields)
        for f, ((_, mask), width) in enumerate(zip(fields, field_widths(self.params.usids))):
            self.cover.sample(field="usid" if f else "locator", mask=mask_shape(mask, width))
        taking = sum(bool(mask) for _, mask in fields)
        self.cover.sample(fields_taking="none" if not taking else "one" if taking == 1 else
                          "all" if taking == len(fields) else "several")
        for f, (init, mask) in enumerate(fields):
            self.cfg.send_nowait({"field": f, "init": init, "mask": mask})
        await self.cfg.wait_idle()
        await RisingEdge(self.dut.clk)

    def fields(self, usids):
        """``usids`` uSID configurations fitted to this block: cut or padded with fixed zero fields."""
        return (usids + [(0, 0)] * self.params.usids)[:self.params.usids]

    def send(self, ev):
        out = self.model.process(ev)
        bits = self.params.ev_bits
        taken = sum(bin(mask).count("1") for _, mask in self.model.fields)
        unused = ev & ((1 << (bits - taken)) - 1)
        self.cover.sample(outcome="expanded" if out["ok"] else "bad_ev",
                          taken="0" if not taken else "=ev_bits" if taken == bits else "partial",
                          ev="zero" if not ev else "ones" if ev == (1 << bits) - 1 else "other",
                          unused_set=None if not unused else "lowest" if unused == 1 else
                          "highest" if unused == 1 << (bits - taken - 1) else "other")
        if self.params.ev_bits == 32:
            assert out["da"] == expand(ev, self.model.fields)
        self.board.expect((out["ok"], out["da"] or 0))
        self.source.send_nowait({"ev": ev})
        self.sent += 1

    async def _consume(self):
        while True:
            got = await self.sink.recv()
            if not self.muted:
                self.board.check((bool(got["ok"]), got["da"]))
                self.received += 1

    async def drain(self):
        waited, seen = 0, self.received
        while self.source.queue or self.received < self.sent:
            await RisingEdge(self.dut.clk)
            waited = 0 if self.received != seen else waited + 1
            seen = self.received
            assert waited < PATIENCE, f"no progress: {self.sent - self.received} answers missing"

    async def finish(self):
        await self.drain()
        await ReadOnly()
        self.board.check_done()
        c = self.check_counters(self.model.counters)
        if self.sent < 1 << self.params.counter_bits:
            self.conserved("requests", self.sent, **c)
        self.cover.write()
        return c


def random_fields(rng, p):
    """A random configuration taking at most ev_bits EV bits (explicit, generated, fixed, odd masks)."""
    budget, fields = p.ev_bits, []
    for width in field_widths(p.usids):
        mask = rng.getrandbits(width) & rng.choice((0, -1, 0xF0F0F0F0, 0x000F, (1 << width) - 1, 0x8001))
        while bin(mask).count("1") > budget:
            mask &= mask - 1
        budget -= bin(mask).count("1")
        fields.append((rng.getrandbits(width), mask))
    return fields


def random_ev(rng, m):
    """Mostly valid EVs (unused bits clear), some with unused bits set, at the boundary too."""
    bits = m.params.ev_bits
    total = sum(bin(mask).count("1") for _, mask in m.fields)
    ev = rng.getrandbits(bits)
    unused = bits - total
    r = rng.random()
    if unused and r < 0.7:
        ev &= ~((1 << unused) - 1)
    elif unused and r < 0.85:
        ev = (ev & ~((1 << unused) - 1)) | 1 << rng.choice((0, unused - 1))
    return ev


@cocotb.test()
async def ocp_cases(dut):
    """The OCP field-expansion cases: explicit, generated (init under the mask overwritten), fixed,
    odd masks MSB-first, several uSIDs consuming the EV in order, fewer uSIDs; unused bits at the
    boundary (the highest and the lowest unused bit)."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, backpressure=0.3)
    p = t.params
    await t.reset()
    full, bits = (1 << 16) - 1, p.ev_bits
    cases = [
        [(LOC, 0)] + t.fields([(0, full), (0, full)]),                               # explicit
        [(LOC, 0)] + t.fields([(0x0100, 0x000F), (0x0207, 0x0007), (0xE000, 0)]),      # generated
        [(LOC, 0)] + t.fields([(0x0101, 0), (0xFFFE, 0)]),                             # fixed
        [(LOC, 0x0000_0101)] + t.fields([(0x5A5A, 0xA5A5), (0, 0x8001)]),               # odd masks
        [(LOC, 0)] + t.fields([(0x1000 * (i + 1), 0x001F) for i in range(6)]),          # several uSIDs
        [(LOC, 0xFF)] + t.fields([(0xABCD, 0)]),                                       # fewer uSIDs
        [(LOC, 1 << 31)] + t.fields([(0x1234, 0x8000), (0, 1)]),                      # single bits, MSB/LSB
        [(0, (1 << 32) - 1)] + t.fields([]),                                           # the whole locator
        [(0, 0)] * (1 + p.usids),                                                      # reset state
    ]
    for fields in cases:
        taken = 0
        for k, (init, mask) in enumerate(fields):             # within ev_bits: drop the lowest mask bits
            while taken + bin(mask).count("1") > bits:
                mask &= mask - 1
            fields[k] = (init, mask)
            taken += bin(mask).count("1")
        await t.configure(fields)
        unused = bits - taken
        evs = [0, (1 << bits) - 1 & ~((1 << unused) - 1), rng.getrandbits(bits) & ~((1 << unused) - 1)]
        if unused:
            evs += [1, 1 << (unused - 1), (1 << bits) - 1]
        for ev in evs:
            t.send(ev)
    c = await t.finish()
    assert c["expanded"] and c["bad_ev"]


@cocotb.test()
async def random_expansion(dut):
    """Random configurations (rewritten between bursts), random EVs with idle and backpressure."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2, backpressure=0.3)
    await t.reset()
    for _ in range(40):
        await t.configure(random_fields(rng, t.params))
        for _ in range(40):
            t.send(random_ev(rng, t.model))
    c = await t.finish()
    assert c["expanded"] and c["bad_ev"]


@cocotb.test()
async def line_rate(dut):
    """One EV per cycle in, one DA per cycle out."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.reset()
    await t.configure(random_fields(rng, t.params))
    n, busy, stalls = 500, 0, 0
    for _ in range(n):
        t.send(random_ev(rng, t.model))
    while t.received < n:
        await RisingEdge(dut.clk)
        busy += 1
        stalls += bool(dut.i__valid.value) and not dut.i__ready.value
    assert stalls == 0 and busy <= n + 3, f"{n} EVs took {busy} cycles ({stalls} stalls): not one per cycle"
    await t.finish()


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset among queued requests clears the registers (all fields fixed at 0) and the counters."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2, backpressure=0.5)
    await t.reset()
    await t.configure(random_fields(rng, t.params))
    for _ in range(200):
        t.send(random_ev(rng, t.model))
    await t.reset_mid_traffic(60, t.restart)
    for ev in (0, 1, 1 << (t.params.ev_bits - 1)):
        t.send(ev)
    await t.configure(random_fields(rng, t.params))
    for _ in range(100):
        t.send(random_ev(rng, t.model))
    await t.finish()


# --- pytest ----------------------------------------------------------------------------------------

PARAMS = {
    "default": EvExpanderParams(usids=6),
    #: two uSIDs, a 20-bit EV, 2-bit saturating counters.
    "small": EvExpanderParams(usids=2, ev_bits=20, counter_bits=2),
}


def runs(config, test):
    return config == "default" or test in ("ocp_cases", "random_expansion")


@runner.parametrize(__name__, PARAMS, select=runs)
def test_ev_expander(params, testcase, record_property):
    record_property("innet", runner.run(EvExpander, params, __name__, testcase))
