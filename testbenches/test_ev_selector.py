"""MRC EV selector: golden model, directed rules of SPEC section 5 and its formal properties; the RTL
under Verilator against the cycle-accurate model every cycle (selection, stall, retransmit, slot states).
"""
import itertools
import random

import cocotb
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
    EvSelectorParams,
)
from testbenches import runner, tb


def ev_in(m, slot):
    return m.slots[slot][0]


def states(m):
    return [s for _, s in m.slots]


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
