"""The ev_expander golden model alone (``models/ev_expander.py``): the tests that need no RTL."""
import pytest

from models import wire
from models.ev_expander import (
    COUNTERS,
    EvExpanderParams,
    bytes_of,
    contract,
    ev_of_bytes,
    expand,
    pdep,
    pext,
    profile,
    refusal,
)
from models.headers import usid_parts
from testbenches.soak_traffic import consumed, random_ev
from testbenches.test_ev_expander import LOC, OCP, SRV6, STEV, fld, model, ocp_profiles, ocp_verdicts, oracle


def srv6(usids, locator=(LOC, 0)):
    """An SRv6 DA profile: a 32-bit locator ``(init, mask)``, then 16-bit uSIDs ``(init, mask)``."""
    return profile(SRV6, [32] + [16] * len(usids), [fld(32, *locator)] + [fld(16, *u) for u in usids])


def answer(m, ev):
    return m.process("i", {"ev": ev})["o"][0]


def test_recorded_source_is_pinned():
    assert OCP["repository"] == "opencomputeproject/OCP-Multipath-Reliable-Connection"
    assert OCP["commit"] == "662a1509e7e49315ae912099ceec3874a04b1442"
    assert OCP["blob"] == "3dd79a5d3018d64242204eb8d8c942c9f0416925"
    assert [len(cases) for _, _, cases in ocp_profiles()] == [8] * 10


@pytest.mark.parametrize("ev_bits", [128, 256])
def test_model_matches_every_ocp_case(ev_bits):
    """Every case of OCP's ten profiles, with the EV bound at 128 bits (the RTL's default) and at ev_t's
    full 256; the oracle agrees, and the slots hold the field values the program printed."""
    m = model(ev_bits=ev_bits)
    for name, prof, cases in ocp_profiles():
        assert refusal(prof, m.params) is None, name
        m.process("cfg", prof)
        for raw, exp_raw, values in cases:
            ev = ev_of_bytes(raw, ev_bits)
            assert bytes_of(ev, ev_bits) == raw, f"{name}: the EV fits ev_bits"
            assert answer(m, ev) == {"ok": True, "exp_ev": int.from_bytes(exp_raw, "big")}, name
            assert expand(ev_of_bytes(raw, 256), prof) == int.from_bytes(exp_raw, "big"), name
            at, full = 0, int.from_bytes(exp_raw, "big")
            for width, value in zip(prof["fmt_fields"], values):
                at += width
                assert full >> (256 - at) & ((1 << width) - 1) == value & ((1 << width) - 1), name
    assert m.counters() == {"expanded": 80, "bad_ev": 0, "configured": 10, "refused": 0}


def test_model_random_evs_per_ocp_profile(rng):
    """Random EVs per OCP profile, against the PDEP oracle: valid ones and ones with an unused bit set."""
    m = model()
    for name, prof, _ in ocp_profiles():
        m.process("cfg", prof)
        for _ in range(200):
            ev = random_ev(rng, 128, consumed(prof))
            want = oracle(ev, prof, 128, 256)
            assert answer(m, ev) == want, name
            if want["ok"]:
                assert contract(want["exp_ev"], prof, 128, 256) == ev, name


def test_model_matches_ocp_verdicts():
    """OCP's own check_profs and verify_unused_bits_zero on the edge cases: the model refuses exactly the
    profiles OCP refuses, and of the EVs of an accepted profile exactly those OCP refuses, expanding the
    others as OCP does."""
    m = model(ev_bits=256, max_fields=64)
    assert len(OCP["check_profs"]) == 14 and sum(c["accepted"] for c in OCP["check_profs"]) == 7
    for prof, accepted, cases in ocp_verdicts():
        assert (refusal(prof, m.params) is None) == accepted, (prof, refusal(prof, m.params))
        if accepted:
            m.process("cfg", prof)
            for raw, exp_raw in cases:
                out = answer(m, ev_of_bytes(raw, 256))
                assert out["ok"] == (exp_raw is not None), (prof, raw.hex())
                assert exp_raw is None or out["exp_ev"] == int.from_bytes(exp_raw, "big"), (prof, raw.hex())


def test_oracles_pdep_pext():
    assert pdep(0b101, 0xA001) == 0x8001
    assert pdep(0xFFFF, 0xFFFF) == 0xFFFF and pdep(0x1234, 0) == 0
    for mask, bits in ((0xA5A5, 0x55), (0x0F0F, 0xAB), (0x8001, 0b10)):
        assert pext(pdep(bits, mask), mask) == bits
    prof = srv6([(0x0F00, 0xA001), (0, 0xFFFF)])
    ev = (0b101 << 16 | 0x1234) << (128 - 19)
    da = expand(ev, prof, 128, 128)
    assert usid_parts(da) == (LOC, [0x8F01, 0x1234, 0, 0, 0, 0])
    assert contract(da, prof, 128, 128) == ev
    assert expand(ev | 1, prof, 128, 128) is None


def test_explicit_fields_copy_the_ev():
    m = model(srv6([(0, 0xFFFF), (0, 0xFFFF)]))
    out = answer(m, 0xBEEF_1234 << 96)
    assert out["ok"] and usid_parts(out["exp_ev"] >> 128) == (LOC, [0xBEEF, 0x1234, 0, 0, 0, 0])


def test_generated_fields_overwrite_init_under_the_mask():
    m = model(srv6([(0x0100, 0x000F), (0x0207, 0x0007), (0xE000, 0)]))
    assert usid_parts(answer(m, 0b1011_110 << 121)["exp_ev"] >> 128) == (LOC, [0x010B, 0x0206, 0xE000, 0, 0, 0])
    assert usid_parts(answer(m, 0)["exp_ev"] >> 128) == (LOC, [0x0100, 0x0200, 0xE000, 0, 0, 0])


def test_fixed_fields_refuse_any_set_bit():
    """A profile without mask bits: only EV 0 expands; any set bit, up to the last of ev_bits, is refused."""
    m = model(srv6([(0x0101, 0), (0xFFFE, 0)]))
    fixed = answer(m, 0)["exp_ev"]
    assert usid_parts(fixed >> 128) == (LOC, [0x0101, 0xFFFE, 0, 0, 0, 0])
    assert answer(m, 1) == {"ok": False, "exp_ev": fixed} and not answer(m, 1 << 127)["ok"]
    assert m.counters() == {"expanded": 1, "bad_ev": 2, "configured": 1, "refused": 0}


def test_odd_masks_msb_first():
    """Non-contiguous masks: the first EV bit taken lands on the mask's most significant set bit."""
    m = model(srv6([(0x5A5A, 0xA5A5), (0, 0x8001)], locator=(LOC, 0x0101)))
    ev = (0b10 << 10 | 0b1100_0011 << 2 | 0b01) << (128 - 12)
    loc, us = usid_parts(answer(m, ev)["exp_ev"] >> 128)
    assert loc == (LOC & ~0x101) | 0x100 and us[:2] == [0xFA5F, 0x0001]
    assert not answer(m, ev | 1 << (128 - 13))["ok"] and answer(m, ev)["ok"]


def test_narrow_fields_wide_slots_and_truncation():
    """OCP's SRv6 Generated: 4-bit fields right-aligned in 16-bit slots. A field wider than its slot
    keeps its low bits there (pack_value_into_ev), its high mask bits still take EV bits; a format field
    without an EV field stays zero."""
    m = model(profile(STEV, [8, 8, 16], [fld(16, 0xA500, 0x0F0F), fld(8, 0, 0xFF)]))
    ev = (0x3C << 8 | 0x99) << (128 - 16)
    assert answer(m, ev)["exp_ev"] >> 224 == 0x0C99_0000


def test_refusals_follow_ocp():
    """Each rule of check_profs, mrc_ctl.h's ev_t layout and the device's bounds refuses the profile; the
    block keeps the one it had (counter refused)."""
    good = srv6([(0, 0xFFFF)])
    m = model(good, ev_bits=32, max_fields=4)
    refused = {
        "num_fields > num_fmt_fields": profile(STEV, [16], [fld(8), fld(8)]),
        "sum of field widths": profile(STEV, [8, 8], [fld(16), fld(1)]),
        "wider than 32 bits": profile(SRV6, [64], [fld(33)]),
        "init_val wider": profile(STEV, [16], [fld(4, init=0x10)]),
        "mask has bits outside": profile(STEV, [16], [fld(4, mask=0x10)]),
        "max_val wider than its mask bits": profile(STEV, [16], [fld(8, mask=0x0F, hi=0x10)]),
        "not STEV or SRv6": profile(wire.EV_FMT_MODE_UDP, [16], [fld(16, mask=0xFFFF)]),
        "more than the mode's 32": profile(STEV, [32, 8], [fld(8)]),
        "max_fields": profile(STEV, [1] * 5, []),
        "ev_bits = 32": profile(SRV6, [32, 16], [fld(32, mask=0xFFFF_FFFF), fld(16, mask=1)]),
    }
    for reason, prof in refused.items():
        assert reason in (refusal(prof, m.params) or ""), (reason, refusal(prof, m.params))
        m.process("cfg", prof)
    assert m.counters()["refused"] == len(refused)
    assert usid_parts(answer(m, 0xABCD << 16)["exp_ev"] >> 128)[1][0] == 0xABCD     # the old profile
    # what OCP takes: max_val unchecked under a zero mask, min_val never, zero widths, an empty profile
    for prof in (profile(STEV, [16], [fld(8, hi=0xFFFF_FFFF, lo=7)]), profile(SRV6, [0, 16], [fld(0), fld(16)]),
                 profile(STEV, [], []), profile(STEV, [8, 8], [fld(8, mask=0xFF, hi=0xFF)])):
        assert refusal(prof, m.params) is None, prof


def test_exp_bits_and_field_bits_bound_the_block():
    p = EvExpanderParams(exp_bits=64, field_bits=8)
    assert "exp_bits = 64" in refusal(srv6([(0, 0)] * 3), p)
    assert "field_bits = 8" in refusal(profile(STEV, [16], [fld(9)]), p)
    assert refusal(profile(STEV, [16, 16], [fld(8, 0x12, 0x0F), fld(8)]), p) is None


def test_reset_empties_the_profile():
    m = model(srv6([(0, 0xFFFF)]))
    answer(m, 5 << 100)
    m.reset()
    assert m.counters() == dict.fromkeys(COUNTERS, 0)
    assert answer(m, 0) == {"ok": True, "exp_ev": 0} and not answer(m, 1)["ok"]


def test_counters_saturate():
    m = model(counter_bits=2)
    for _ in range(5):
        answer(m, 0), answer(m, 1), m.process("cfg", profile(STEV, [8], [])), m.process("cfg", profile(4, [], []))
    assert m.counters() == dict.fromkeys(COUNTERS, 3)


def test_bad_inputs_name_the_field():
    m = model(ev_bits=8)
    with pytest.raises(ValueError, match="ev = 256"):
        answer(m, 256)
    with pytest.raises(ValueError, match=r"fields\[0\].mask"):
        m.process("cfg", profile(STEV, [8], [fld(8, mask=1 << 32)]))
    with pytest.raises(ValueError, match="port = 'x'"):
        m.process("x", {})


@pytest.mark.parametrize("field, value, error", [
    ("ev_bits", 0, ValueError), ("ev_bits", 257, ValueError), ("exp_bits", 0, ValueError),
    ("max_fields", 0, ValueError), ("field_bits", 33, ValueError), ("counter_bits", 0, ValueError),
    ("max_fields", "2", TypeError), ("ev_bits", True, TypeError)])
def test_bad_parameters_name_the_field(field, value, error):
    with pytest.raises(error, match=f"EvExpanderParams.{field}"):
        EvExpanderParams(**{field: value})
