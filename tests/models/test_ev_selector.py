"""The ev_selector golden model alone (``models/ev_selector.py``): the tests that need no RTL."""
import pytest

from models.ev_selector import (
    ASSUMED_BAD,
    COUNTERS,
    DENIED,
    EVENT_COUNTERS,
    GOOD,
    SKIP,
    EvSelectorModel,
    EvSelectorParams,
)
from testbenches.test_ev_selector import ev_in, random_event, states


def ev_of(plane, k):
    """A distinct EV per (plane, k): the sport part ephemeral (0xC000 | k)."""
    return (0x1000 + plane) << 16 | 0xC000 | k


def filled(extra=2, **kw):
    """A selector whose slots are all GOOD (EV k of plane p in slot k*planes+p) and ``extra``
    backups per plane."""
    m = EvSelectorModel(EvSelectorParams(**{"min_active": 0, **kw}))
    p = m.params
    for k in range(p.n_ev // p.planes + extra):
        for plane in range(p.planes):
            m.tick(False, {"kind": "backup", "plane": plane, "ev": ev_of(plane, k)})
    return m


def ev_event(m, kind, slot, **kw):
    return {"kind": kind, "slot": slot, "ev": ev_in(m, slot), **kw}


def test_backups_fill_vacant_slots_then_the_fifo():
    m = filled(n_ev=4, planes=2, extra=1)
    assert m.slots == [[ev_of(0, 0), GOOD], [ev_of(1, 0), GOOD], [ev_of(0, 1), GOOD], [ev_of(1, 1), GOOD]]
    assert [list(f) for f in m.backups] == [[ev_of(0, 2)], [ev_of(1, 2)]]
    assert m.counters["backup"] == 6


def test_round_robin_selection_one_per_cycle():
    m = filled(n_ev=4, planes=2)
    picks = [m.tick(True) for _ in range(9)]
    assert [o["slot"] for o in picks] == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert [o["plane"] for o in picks[:4]] == [0, 1, 0, 1]
    assert picks[2]["ev"] == ev_of(0, 1) and picks[0]["valid"] and not picks[0]["stall"]
    assert m.tick(False) == {"valid": False, "slot": None, "stall": False, "ev": None, "plane": None,
                             "retransmit": False}
    assert m.cursor == 1


def test_skip_is_passed_once_and_becomes_good_unused():
    m = filled(n_ev=4, planes=2)
    m.tick(False, ev_event(m, "ecn", 1))
    assert states(m) == [GOOD, SKIP, GOOD, GOOD] and m.counters["ecn_skip"] == 1
    assert m.tick(True)["slot"] == 0
    assert m.tick(True)["slot"] == 2              # slot 1 passed: cleared, not used
    assert states(m) == [GOOD] * 4 and m.counters["skip_cleared"] == 1
    assert m.tick(True)["slot"] == 3 and m.tick(True)["slot"] == 0 and m.tick(True)["slot"] == 1


def test_at_most_one_skip_cleared_per_selection():
    m = filled(n_ev=4, planes=2)
    for s in (0, 1, 2):
        m.tick(False, ev_event(m, "ecn", s))
    assert m.tick(True)["slot"] == 3
    assert states(m) == [GOOD, SKIP, SKIP, GOOD]
    assert m.tick(True)["slot"] == 0
    assert m.tick(True)["slot"] == 3 and states(m) == [GOOD, GOOD, SKIP, GOOD]


def test_no_good_slot_stalls_and_clears_one_skip():
    m = filled(n_ev=4, planes=2)
    for s in range(4):
        m.tick(False, ev_event(m, "ecn", s))
    out = m.tick(True)
    assert out["stall"] and not out["valid"] and m.counters["no_ev"] == 1
    assert states(m) == [GOOD, SKIP, SKIP, SKIP] and m.cursor == 0
    assert m.tick(True)["slot"] == 0
    # No usable slot at all: stall, nothing cleared; want low: no stall.
    e = EvSelectorModel(EvSelectorParams(n_ev=2, planes=1, min_active=0))
    assert e.tick(True)["stall"] and not e.tick(False)["stall"]
    assert e.counters["no_ev"] == 1 and e.counters["selected"] == 0


def test_ecn_on_skip_does_not_rearm():
    m = filled(n_ev=4, planes=2)
    m.tick(False, ev_event(m, "ecn", 2))
    m.tick(False, ev_event(m, "ecn", 2))
    assert m.slots[2][1] == SKIP and m.counters["ecn_skip"] == 1 and m.counters["ecn_held"] == 1


def test_trim_requests_retransmit_and_skips_only_off_the_last_hop():
    m = filled(n_ev=4, planes=2)
    out = m.tick(False, ev_event(m, "trim", 1, last_hop=True))
    assert out["retransmit"] and states(m) == [GOOD] * 4 and m.counters["trim_kept"] == 1
    out = m.tick(False, ev_event(m, "trim", 1, last_hop=False))
    assert out["retransmit"] and m.slots[1][1] == SKIP and m.counters["trim_skip"] == 1
    out = m.tick(False, ev_event(m, "trim", 1, last_hop=False))          # a trim never demotes
    assert out["retransmit"] and m.slots[1][1] == SKIP and m.counters["trim_kept"] == 2
    out = m.tick(False, {"kind": "trim", "slot": 0, "ev": 7, "last_hop": False})
    assert out["retransmit"] and m.counters["stale"] == 1 and m.slots[0][1] == GOOD
    assert all(e is None for e in m.pool)


def test_loss_refills_from_the_same_plane_and_probes_the_old_ev():
    m = filled(n_ev=4, planes=2, extra=1, min_active=4)
    old = ev_in(m, 3)
    m.tick(False, ev_event(m, "loss", 3))
    assert m.slots[3] == [ev_of(1, 2), GOOD] and not m.backups[1] and list(m.backups[0]) == [ev_of(0, 2)]
    assert m.pool[0] == [old, 1, 0]
    assert m.counters["demoted"] == 1 and m.counters["refilled"] == 1
    # Plane 1 has no backup left and the floor is 4: the next loss on plane 1 is suppressed.
    m.tick(False, ev_event(m, "loss", 1))
    assert m.slots[1] == [ev_of(1, 0), GOOD] and m.counters["demote_suppressed"] == 1
    # Plane 0 still has a backup: its loss goes through even at the floor.
    m.tick(False, ev_event(m, "loss", 0))
    assert m.slots[0] == [ev_of(0, 2), GOOD] and m.counters["demoted"] == 2


def test_loss_without_backup_leaves_assumed_bad_down_to_the_floor():
    m = filled(n_ev=4, planes=2, extra=0, min_active=2)
    m.tick(False, ev_event(m, "loss", 0))
    m.tick(False, ev_event(m, "loss", 1))
    assert states(m) == [ASSUMED_BAD, ASSUMED_BAD, GOOD, GOOD] and m.usable() == 2
    m.tick(False, ev_event(m, "loss", 2))
    assert m.usable() == 2 and m.counters["demote_suppressed"] == 1
    # A loss on a SKIP slot demotes it too; a loss on a vacant slot is stale.
    m2 = filled(n_ev=4, planes=2, extra=0, min_active=0)
    m2.tick(False, ev_event(m2, "ecn", 2))
    m2.tick(False, ev_event(m2, "loss", 2))
    assert m2.slots[2][1] == ASSUMED_BAD
    m2.tick(False, {"kind": "loss", "slot": 2, "ev": ev_of(0, 1)})
    assert m2.counters["stale"] == 1 and m2.counters["demoted"] == 1


def test_probes_resurrect_after_probe_ok_n_successes():
    m = filled(n_ev=4, planes=2, extra=0, min_active=0, probe_ok_n=3)
    bad = ev_in(m, 2)
    m.tick(False, ev_event(m, "loss", 2))
    assert m.slots[2][1] == ASSUMED_BAD and m.pool[0] == [bad, 0, 0]
    probe = {"kind": "probe", "index": 0, "ev": bad}
    m.tick(False, {**probe, "ok": True})
    m.tick(False, {**probe, "ok": True})
    m.tick(False, {**probe, "ok": False})                 # a failure starts the count again
    assert m.pool[0] == [bad, 0, 0] and m.counters["probe_fail"] == 1
    m.tick(False, {**probe, "ok": True})
    m.tick(False, {**probe, "ok": True})
    assert m.slots[2][1] == ASSUMED_BAD
    m.tick(False, {**probe, "ok": True})
    assert m.pool[0] is None and m.slots[2] == [bad, GOOD]  # back to its plane: the vacant slot
    assert m.counters["probe_ok"] == 4 and m.counters["probe_restored"] == 1
    m.tick(False, {**probe, "ok": True})
    assert m.counters["stale"] == 1


def test_restored_ev_joins_the_fifo_when_no_slot_is_vacant():
    m = filled(n_ev=2, planes=1, extra=1, min_active=0, probe_ok_n=1, backup_depth=1)
    bad = ev_in(m, 0)
    m.tick(False, ev_event(m, "loss", 0))                 # refilled from the FIFO
    m.tick(False, {"kind": "backup", "plane": 0, "ev": 99})
    m.tick(False, {"kind": "probe", "index": 0, "ev": bad, "ok": True})
    assert list(m.backups[0]) == [99] and m.counters["backup_full"] == 1  # FIFO full: discarded
    m.tick(False, {"kind": "backup", "plane": 0, "ev": 100})
    assert m.counters["backup_full"] == 2


def test_probe_pool_full_discards():
    m = filled(n_ev=4, planes=2, extra=2, min_active=0, probe_slots=1)
    m.tick(False, ev_event(m, "loss", 0))
    m.tick(False, ev_event(m, "loss", 1))
    assert m.counters["probe_full"] == 1 and m.counters["demoted"] == 2 and m.pool[0][1] == 0


def test_deny_retires_the_ev_and_refills_without_a_floor():
    m = filled(n_ev=4, planes=2, extra=1, min_active=4)
    m.tick(False, ev_event(m, "deny", 0))
    assert m.slots[0] == [ev_of(0, 2), GOOD] and all(e is None for e in m.pool)
    m.tick(False, ev_event(m, "deny", 0))
    assert m.slots[0][1] == DENIED and m.usable() == 3 and m.counters["denied"] == 2
    m.tick(False, ev_event(m, "ecn", 0))
    assert m.counters["stale"] == 1
    m.tick(False, {"kind": "backup", "plane": 0, "ev": 5})
    assert m.slots[0] == [5, GOOD]


def test_selection_then_event_in_one_cycle():
    m = filled(n_ev=4, planes=2, extra=1, min_active=0)
    old = ev_in(m, 0)
    out = m.tick(True, ev_event(m, "loss", 0))            # the packet goes out on the old EV
    assert out["slot"] == 0 and out["ev"] == old and m.slots[0] == [ev_of(0, 2), GOOD]
    # The event sees the selection's SKIP->GOOD: an ECN on the cleared slot sets it SKIP again.
    m.tick(False, ev_event(m, "ecn", 1))
    out = m.tick(True, ev_event(m, "ecn", 1))
    assert out["slot"] == 2 and m.slots[1][1] == SKIP
    assert m.counters["skip_cleared"] == 1 and m.counters["ecn_skip"] == 2


def test_bad_events_raise():
    m = filled(n_ev=4, planes=2)
    for event, match in (({"kind": "nack"}, "event kind"), ({"kind": "ecn", "slot": 4, "ev": 0}, "slot"),
                         ({"kind": "backup", "plane": 2, "ev": 0}, "plane"),
                         ({"kind": "backup", "plane": 0, "ev": 1 << 32}, "ev_bits"),
                         ({"kind": "probe", "index": 8, "ev": 0, "ok": True}, "index")):
        with pytest.raises(ValueError, match=match):
            m.tick(False, event)


def test_counters_saturate_and_reset():
    m = filled(n_ev=2, planes=1, counter_bits=2)
    for _ in range(5):
        m.tick(True)
    assert m.counters["selected"] == 3 and m.counters["backup"] == 3
    m.reset()
    assert m.counters() == dict.fromkeys(COUNTERS, 0) and states(m) == [DENIED] * 2 and m.cursor == 0


@pytest.mark.parametrize("kw", [dict(n_ev=16, planes=2, min_active=8), dict(n_ev=8, planes=4, min_active=2,
                                probe_slots=2, backup_depth=2), dict(n_ev=6, planes=3, min_active=6)])
def test_random_feedback_keeps_the_formal_properties(rng, kw):
    m = filled(extra=1, **kw)
    p = m.params
    fresh = iter(range(1 << 20, 1 << 21))
    injected = p.n_ev + p.planes
    wants, events = 0, injected
    for _ in range(4000):
        want = rng.random() < 0.7
        event = random_event(m, rng, fresh)
        before = [list(s) for s in m.slots]
        usable_before = m.usable()
        plane_before = [m.usable(q) for q in range(p.planes)]
        had_backup = [bool(f) for f in m.backups]
        out = m.tick(want, event)
        wants += want
        events += event is not None
        injected += event is not None and event["kind"] == "backup"
        # A selected slot is GOOD (in the state the selection read); a stall only when none is.
        if out["valid"]:
            assert before[out["slot"]][1] == GOOD and out["ev"] == before[out["slot"]][0]
            assert out["plane"] == out["slot"] % p.planes
        assert out["stall"] == (want and all(s != GOOD for _, s in before))
        # At most one SKIP->GOOD per cycle (a refill with a new EV is not a SKIP->GOOD).
        cleared = [i for i, (b, a) in enumerate(zip(before, m.slots)) if b == [a[0], SKIP] and a[1] == GOOD]
        assert len(cleared) <= 1
        if event is not None and event["kind"] in ("loss", "deny"):
            q = event["slot"] % p.planes
            if event["kind"] == "loss" and usable_before >= p.min_active:
                assert m.usable() >= p.min_active                       # the floor holds after a loss
            if had_backup[q]:
                assert m.usable(q) == plane_before[q]                   # per-plane count while backups last
        for q in range(p.planes):                                       # a plane with backups has no hole
            if m.backups[q]:
                assert m.usable(q) == p.n_ev // p.planes
        # EV conservation: every injected EV is in a usable slot, a FIFO or the pool, or was dropped.
        live = ([ev for ev, s in m.slots if s in (GOOD, SKIP)] + [ev for f in m.backups for ev in f]
                + [e[0] for e in m.pool if e is not None])
        assert len(live) == len(set(live))
        c = m.counters
        assert len(live) == injected - c["backup_full"] - c["probe_full"] - c["denied"]
        assert c["selected"] + c["no_ev"] == wants
        assert sum(c[k] for k in EVENT_COUNTERS) == events
    assert m.counters["demoted"] and m.counters["probe_restored"] and m.counters["skip_cleared"]


@pytest.mark.parametrize("kw, field, error", [
    (dict(n_ev=0), "n_ev", ValueError), (dict(planes=0), "planes", ValueError),
    (dict(n_ev="16"), "n_ev", TypeError), (dict(probe_ok_n=0), "probe_ok_n", ValueError),
    (dict(n_ev=6, planes=4), "n_ev = 6", ValueError), (dict(min_active=17), "min_active = 17", ValueError),
    (dict(backup_depth=0), "backup_depth", ValueError), (dict(ev_bits=33), "ev_bits", ValueError)])
def test_bad_parameters_name_the_field(kw, field, error):
    with pytest.raises(error, match=f"EvSelectorParams.*{field}"):
        EvSelectorParams(**kw)
