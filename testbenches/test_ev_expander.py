"""MRC EV expander: golden model against the OCP field-expansion cases and the pdep oracle."""
import os
import socket

import pytest

from models.ev_expander import COUNTERS, EvExpanderModel, EvExpanderParams, contract, expand, field_widths, pdep, pext
from models.headers import usid_address, usid_parts
from testbenches import runner

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
