"""MRC EV selector: golden model, directed rules of SPEC section 5 and its formal properties; the RTL
under Verilator against the cycle-accurate model every cycle (selection, stall, retransmit, slot states).
"""
import itertools
import os
import random

import cocotb
import pytest
from cocotb.triggers import ReadOnly

from hdl.ev_selector import KIND, EvSelector
from models.ev_selector import (
    ASSUMED_BAD,
    COUNTERS,
    DENIED,
    EFFECTS,
    EVENT_COUNTERS,
    EVENT_KINDS,
    GOOD,
    SKIP,
    EvSelectorModel,
    EvSelectorParams,
)
from testbenches import runner, tb


@pytest.fixture
def rng():
    return runner.model_rng(os.environ.get("PYTEST_CURRENT_TEST", "ev_selector"))


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


def ev_in(m, slot):
    return m.slots[slot][0]


def states(m):
    return [s for _, s in m.slots]


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


KINDS = ("ecn", "trim", "loss", "probe", "deny", "backup", None)


def random_event(m, rng, fresh):
    kind = rng.choices(KINDS, weights=(4, 3, 3, 5, 1, 2, 6))[0]
    p = m.params
    if kind is None:
        return None
    if kind == "backup":
        return {"kind": kind, "plane": rng.randrange(p.planes), "ev": next(fresh)}
    if kind == "probe":
        live = [i for i, e in enumerate(m.pool) if e is not None]
        i = rng.choice(live) if live and rng.random() < 0.9 else rng.randrange(p.probe_slots)
        ev = m.pool[i][0] if m.pool[i] is not None and rng.random() < 0.95 else rng.getrandbits(32)
        return {"kind": kind, "index": i, "ev": ev, "ok": rng.random() < 0.8}
    slot = rng.randrange(p.n_ev)
    ev = ev_in(m, slot) if rng.random() < 0.9 else rng.getrandbits(32)
    event = {"kind": kind, "slot": slot, "ev": ev}
    if kind == "trim":
        event["last_hop"] = rng.random() < 0.5
    return event


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


# --- RTL under Verilator ------------------------------------------------------------------------------

#: Cross bins that cannot happen, and why (the coverage report prints the reason).
NO_SLOT = "probe and backup events name no active slot"
STATE_NAMES = dict(zip((GOOD, SKIP, ASSUMED_BAD, DENIED), ("GOOD", "SKIP", "ASSUMED_BAD", "DENIED")))


def fill_bin(count, capacity):
    return ("full" if count >= capacity else "one_free" if count == capacity - 1 else "empty" if not count
            else "partial")


def coverage():
    """The selector's functional coverage: every event kind against every slot state (SPEC 5), the
    selection's cursor and SKIP edges, the pool, backup FIFO and MIN_ACTIVE floor edges."""
    cover = tb.Coverage("ev_selector")
    cover.point("kind", EVENT_KINDS + ("undefined",))
    cover.point("slot_state", ("GOOD", "SKIP", "ASSUMED_BAD", "DENIED"))   # the event's slot when it acts
    cover.point("ev_match", ("same", "other"))                              # the event's EV vs the slot's
    cover.point("outcome", EVENT_COUNTERS)
    cover.point("effect", EFFECTS)
    cover.point("last_hop", ("last_hop", "fabric"))
    cover.point("select", ("selected", "stall", "idle"))
    cover.point("skip_passed", ("cleared", "none"))
    cover.point("cursor", ("at_cursor", "after_cursor", "wrapped"))
    cover.point("pool", ("empty", "partial", "one_free", "full"))           # probe pool at a demotion
    cover.point("backups", ("empty", "partial", "one_free", "full"))        # the plane's FIFO at loss/deny/backup
    cover.point("floor", ("below", "at", "above"))                          # usable - 1 vs MIN_ACTIVE at a loss
    cover.point("probe_count", ("0", "mid", "n-1"))                         # successes before a live probe
    cover.cross("kind_x_slot_state", "kind", "slot_state", unreachable={
        ("probe", None): NO_SLOT, ("backup", None): NO_SLOT, ("undefined", None): "an undefined kind names no slot"})
    cover.cross("kind_x_ev_match", "kind", "ev_match", unreachable={
        ("probe", None): NO_SLOT, ("backup", None): NO_SLOT, ("undefined", None): "an undefined kind names no slot"})
    cover.cross("trim_x_last_hop_x_state", "last_hop", "slot_state")
    cover.cross("select_x_skip_passed", "select", "skip_passed", unreachable={
        ("idle", "cleared"): "a SKIP is cleared only by a selection pass (want)"})
    cover.cross("floor_x_backups", "floor", "backups")
    return cover


class TB(tb.BlockTB):
    """Drives ``i`` one request at a time, with idle and back-pressured cycles at random; the lockstep
    compares ``o`` and ``i.ready`` with ``EvSelectorModel`` every cycle, and ``sample`` the slot states
    and EVs (registers, not ports) with the model's."""

    name = "ev_selector"

    def __init__(self, dut, rng, idle=0.0, backpressure=0.0):
        super().__init__(dut)
        self.rng, self.idle, self.backpressure = rng, idle, backpressure
        self.req, self.ans = self._layout("i"), self._layout("o")
        self.fresh = iter(itertools.count(1 << 20))
        self.cover = coverage()
        self.before = self.answer = None
        dut.i__valid.value = 0
        dut.o__ready.value = 0
        self.restart()

    def restart(self):
        self.wants = self.events = self.cycles = self.selections = 0

    def encode(self, event):
        if event is None:
            return {"valid": 0}
        return {"valid": 1, "kind": KIND[event["kind"]] if isinstance(event["kind"], str) else event["kind"],
                **{k: int(v) for k, v in event.items() if k != "kind"}}

    async def step(self, want, event=None, raw_kind=None):
        """One request, offered until it transfers; returns the answer ``o`` showed then. ``raw_kind``:
        an undefined kind code, which the RTL counts as ``stale``."""
        dut = self.dut
        encoded = self.encode(event) if raw_kind is None else {"valid": 1, "kind": raw_kind}
        dut.i__payload.value = tb.pack(self.req, {"want": int(want), "event": encoded})
        while True:
            valid = self.rng.random() >= self.idle
            ready = self.rng.random() >= self.backpressure
            dut.i__valid.value = int(valid)
            dut.o__ready.value = int(ready)
            await self.edge()
            self.cycles += 1
            if valid and ready:
                break
        self.wants += bool(want)
        self.events += event is not None or raw_kind is not None
        self.selections += self.answer["selected"]
        return self.answer

    def sample(self, values):
        """Slot states compared; on a transfer, the coverage values of the state it meets."""
        self.check_state()
        if values["i__valid"] and values["o__ready"]:
            self.before = (self.coverage_values(tb.unpack(self.req, values["i__payload"])), self.model.counters())

    def sampled(self, values):
        """On a transfer: the outcome and effects it counted; its answer (for ``step``)."""
        if self.before is None:
            return
        (values_before, counters), self.before = self.before, None
        done = [k for k, v in self.model.counters().items() if v != counters[k]]
        self.cover.sample(outcome=next((k for k in done if k in EVENT_COUNTERS), None), **values_before)
        for effect in (k for k in done if k in EFFECTS):
            self.cover.sample(effect=effect)
        self.answer = tb.unpack(self.ans, values["o__payload"])

    def coverage_values(self, request):
        """Coverage values of one transfer of ``request`` from the model's state before it: the selection
        (its ``_select`` is pure) and the state the event meets after the selection's SKIP clearing."""
        m, p = self.model, self.params
        want, (event, undefined) = request["want"], m.decode(request["event"])
        chosen, cleared = m._select() if want else (None, None)
        values = {"select": "idle" if not want else "selected" if chosen is not None else "stall",
                  "skip_passed": "cleared" if cleared is not None else "none"}
        if chosen is not None:
            values["cursor"] = "at_cursor" if chosen == m.cursor else "after_cursor" if chosen > m.cursor else "wrapped"
        if undefined:
            values["kind"] = "undefined"
        if event is None:
            return values
        kind = values["kind"] = event["kind"]
        if kind == "probe":
            entry = m.pool[event["index"]] if 0 <= event["index"] < p.probe_slots else None
            if entry is not None and entry[0] == event["ev"] and event["ok"]:
                values["probe_count"] = ("n-1" if entry[2] == p.probe_ok_n - 1 else "0" if entry[2] == 0 else "mid")
            return values
        if kind == "backup":
            plane = event["plane"]
            vacant = any(m.slots[i][1] in (ASSUMED_BAD, DENIED) for i in range(plane, p.n_ev, p.planes))
            if not vacant:
                values["backups"] = fill_bin(len(m.backups[plane]), p.backup_depth)
            return values
        slot = event["slot"]
        ev, state = m.slots[slot]
        state = GOOD if slot == cleared else state
        values.update(slot_state=STATE_NAMES[state], ev_match="same" if ev == event["ev"] else "other")
        if kind == "trim":
            values["last_hop"] = "last_hop" if event["last_hop"] else "fabric"
        live = ev == event["ev"] and state in (GOOD, SKIP)
        if live and kind in ("loss", "deny"):
            values["backups"] = fill_bin(len(m.backups[m.plane_of(slot)]), p.backup_depth)
        if live and kind == "loss":
            left = m.usable() - 1                           # a SKIP cleared by the selection stays usable
            values["floor"] = "below" if left < p.min_active else "at" if left == p.min_active else "above"
            values["pool"] = fill_bin(sum(x is not None for x in m.pool), p.probe_slots)
        return values

    def check_state(self):
        states = [int(getattr(self.dut, f"state{k}").value) for k in range(self.params.n_ev)]
        assert states == [s for _, s in self.model.slots], (states, self.model.slots)
        for k, (ev, s) in enumerate(self.model.slots):
            if s in (GOOD, SKIP):
                assert int(getattr(self.dut, f"ev{k}").value) == ev, f"slot {k}"

    async def fill(self, extra=1):
        p = self.params
        for k in range(p.n_ev // p.planes + extra):
            for plane in range(p.planes):
                await self.step(False, {"kind": "backup", "plane": plane, "ev": next(self.fresh)})

    async def finish(self):
        await ReadOnly()                         # the last cycle's counts are in after its edge
        c = self.check_counters()
        top = (1 << self.params.counter_bits) - 1
        if self.wants < top and self.events < top:
            self.conserved("requests", self.wants, selected=c["selected"], no_ev=c["no_ev"])
            self.conserved("events", self.events, **{k: c[k] for k in EVENT_COUNTERS})
        tb.summary(cycles_driven=self.cycles)
        self.cover.write()
        return c


async def random_cycles(t, n, want=0.7):
    m = t.model
    for i in range(n):
        await t.step(t.rng.random() < want, random_event(m, t.rng, t.fresh))


@cocotb.test()
async def random_feedback(dut):
    """Seeded random feedback mixes (ECN echo, trimmed NACKs on and off the last hop, untrimmed loss,
    probe results, deny, backups; live and stale EVs) with idle and back-pressured cycles: every
    cycle equals the model's, slot states too; counters; conservation of requests and events."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.1, backpressure=0.2)
    await t.reset()
    await t.fill()
    await random_cycles(t, 3000)
    c = await t.finish()
    for name in ("selected", "skip_cleared", "ecn_skip", "trim_skip", "trim_kept", "demoted",
                 "probe_ok", "probe_restored", "stale", "refilled"):
        assert c[name], name


@cocotb.test()
async def directed(dut):
    """Every rule at its boundary: round robin and wrap; a SKIP passed once (cleared, unused) before
    and after the cursor; stall with one SKIP cleared; ECN on SKIP held; trims on and off the last hop;
    loss refilled from the same plane, down to the floor, then suppressed; probes to PROBE_OK_N with a
    failure between; pool full; backup FIFO full; deny; stale EVs; undefined event kinds."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    p = t.params
    m = t.model
    await t.reset()
    out = await t.step(True)
    assert out["stall"], "after reset every slot is vacant"
    await t.fill(extra=p.backup_depth + 1)                  # one more than the FIFOs hold: backup_full
    assert m.counters["backup_full"] == p.planes
    for _ in range(p.n_ev + 2):                             # round robin, wrapping
        await t.step(True)
    ev_at = lambda k: m.slots[k][0]                          # noqa: E731
    # SKIPs before and after the cursor; a stall clears exactly one
    for k in range(p.n_ev):
        await t.step(False, {"kind": "ecn", "slot": k, "ev": ev_at(k)})
    await t.step(False, {"kind": "ecn", "slot": 0, "ev": ev_at(0)})                     # held
    assert m.counters["ecn_held"] == 1 and all(s == SKIP for _, s in m.slots)
    for _ in range(p.n_ev + 2):
        await t.step(True)
    for k in range(p.n_ev):
        await t.step(False, {"kind": "trim", "slot": k, "ev": ev_at(k), "last_hop": k % 2})
    await t.step(False, {"kind": "trim", "slot": 0, "ev": ev_at(0) ^ 1, "last_hop": 0})   # stale: still a NACK
    for k in range(3):
        await t.step(True)
    # losses: FIFO refills, then vacancies down to the floor, then suppressed; the pool fills up
    for r in range(p.backup_depth * p.planes + p.n_ev + 2):
        k = r % p.n_ev
        await t.step(r % 2 == 0, {"kind": "loss", "slot": k, "ev": ev_at(k)})
    assert m.counters["demote_suppressed"] and m.counters["refilled"]
    assert m.counters["probe_full"] or p.probe_slots > p.n_ev
    # probes: a failure resets the count, PROBE_OK_N successes restore into a vacant slot
    for index, entry in enumerate(list(m.pool)):
        if entry is None:
            continue
        await t.step(True, {"kind": "probe", "index": index, "ev": entry[0], "ok": 1})
        await t.step(True, {"kind": "probe", "index": index, "ev": entry[0], "ok": 0})
        for _ in range(p.probe_ok_n):
            await t.step(False, {"kind": "probe", "index": index, "ev": entry[0], "ok": 1})
        await t.step(False, {"kind": "probe", "index": index, "ev": entry[0], "ok": 1})    # stale now
    # deny without backups leaves DENIED; stale slot and undefined kinds
    for k in range(p.n_ev):
        await t.step(True, {"kind": "deny", "slot": k, "ev": ev_at(k)})
    for raw_kind in range(len(EVENT_KINDS), 1 << (len(EVENT_KINDS) - 1).bit_length()):
        await t.step(True, raw_kind=raw_kind)
    await t.step(True, {"kind": "backup", "plane": 0, "ev": next(t.fresh)})
    # a loss below and at the MIN_ACTIVE floor while its plane's FIFO still holds a backup: demoted and
    # refilled (the floor only binds without backups): plane 0's slots full plus one queued, other planes
    # filled up to `usable` slots
    per_plane = p.n_ev // p.planes
    for usable in (p.min_active, p.min_active + 1):
        if not per_plane <= usable <= p.n_ev or p.backup_depth < 2:
            continue
        while m.usable():                                    # deny all (each refill denied again)
            k = next(k for k, (_, s) in enumerate(m.slots) if s in (GOOD, SKIP))
            await t.step(False, {"kind": "deny", "slot": k, "ev": ev_at(k)})
        for _ in range(per_plane + 1):
            await t.step(False, {"kind": "backup", "plane": 0, "ev": next(t.fresh)})
        for k in range(usable - per_plane):
            await t.step(False, {"kind": "backup", "plane": 1 + k % (p.planes - 1), "ev": next(t.fresh)})
        assert m.usable() == usable and len(m.backups[0]) == 1
        await t.step(False, {"kind": "loss", "slot": 0, "ev": ev_at(0)})
        assert m.usable() == usable, "refilled from the plane's FIFO, not suppressed"
    c = await t.finish()
    assert all(c[name] for name in COUNTERS), c


@cocotb.test()
async def line_rate(dut):
    """A request every cycle with feedback arriving: one selection per cycle, no stall."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    p = t.params
    await t.reset()
    await t.fill()
    n = 600
    before = t.selections
    for _ in range(n):
        k = rng.randrange(p.n_ev)
        await t.step(True, {"kind": rng.choice(("ecn", "trim")), "slot": k, "ev": t.model.slots[k][0],
                            "last_hop": 0})
    assert t.selections - before == n, f"{n} requests, {t.selections - before} selections"
    await t.finish()


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset in the middle of random feedback: every slot vacant (a stall), FIFOs, pool and counters
    cleared; then fresh traffic matches a fresh model."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.1, backpressure=0.2)
    await t.reset()
    await t.fill()
    await random_cycles(t, rng.randrange(100, 600))
    await t.reset(2)
    t.restart()
    assert all(int(getattr(dut, name).value) == 0 for name in COUNTERS), "counters cleared"
    out = await t.step(True)
    assert out["stall"]
    await t.fill()
    await random_cycles(t, 600)
    await t.finish()


# --- pytest ----------------------------------------------------------------------------------------

PARAMS = {
    "default": EvSelectorParams(),
    #: 3 planes of 2 slots, floor = every slot, tiny FIFOs and pool, 3-bit counters, 20-bit EVs.
    "small": EvSelectorParams(n_ev=6, planes=3, min_active=4, backup_depth=2, probe_slots=2, probe_ok_n=2,
                              ev_bits=21, counter_bits=3),
}


def runs(config, test):
    return config == "default" or test in ("random_feedback", "directed")


@runner.parametrize(__name__, PARAMS, select=runs)
def test_ev_selector(params, testcase, record_property):
    record_property("innet", runner.run(EvSelector, params, __name__, testcase))
