"""Formal properties of the MRC EV selector, proved by k-induction.

Requests (``want`` and one feedback event of any kind, slot, EV, index, plane), ``i.valid`` and
``o.ready`` are free on every cycle. The spec reads the selector's architectural state (slot states
and EVs, backup FIFO fill), keeps its own copy of the state before each transfer and computes every
derived quantity itself (GOOD slots, usable counts per plane, transitions), never from the design's
own scan, counts or floor logic. For every transfer:

- a selected slot is GOOD and its EV is the one answered; a stall only when no slot is GOOD;
- at most one SKIP->GOOD per selection (and none without one), the event's own slot apart (a refill);
- the active-EV floor holds after any loss event: ``min_active`` usable slots before, as many after;
- per-plane active count constant while that plane has backups, and such a plane has no vacant slot;
- reset explored: ``rst`` is free at every cycle (no assumption); the cycle after a reset every slot
  is DENIED with EV 0, the backup FIFOs, the probe pool and the cursor are empty/zero (the model's
  ``reset()``, the SPEC's), and every counter is zero;
- counters: ``selected`` / ``no_ev`` increment exactly on a transfer that wants an EV with / without
  a GOOD slot (the spec's count of GOOD slots), ``backup`` on every backup event taken, ``denied`` on
  a deny of a live slot (its EV, GOOD or SKIP), ``demoted`` / ``demote_suppressed`` on a loss of a
  live slot above / at the floor (no backup in its plane and at most ``min_active`` usable slots);
  each on its own event of a live slot, judged on the state the selection left (the spec's own scan
  from the cursor: the first SKIP passed before the first GOOD turns GOOD): ``ecn_skip`` on an ECN of
  a GOOD slot, ``ecn_held`` of a SKIP one, ``trim_skip`` on a non-last-hop trim of a GOOD slot,
  ``trim_kept`` on any other trim; ``skip_cleared`` when the scan clears a SKIP; every other
  event taken (valid) increments exactly one of ``EVENT_COUNTERS`` and no event none of them
  (checked while no event counter is at its top);
- the scan's clear and the refill take effect: a SKIP slot the spec's scan clears is GOOD after the
  transfer (unless the event names that slot), and a live slot lost or denied while its plane has
  backups holds the EV at the head of the plane's FIFO (its architectural state before), GOOD
  (``refilled`` counts exactly those);
- the probe pool: ``probe_ok`` / ``probe_restored`` / ``probe_fail`` / ``probe_full`` on the model's
  rules read on the pool's state, and the entry updates they imply (count + 1, freed, count 0, a
  demoted EV in the lowest free entry; any other entry unchanged); ``backup_full`` when an EV
  returns to a plane with no vacant slot and a full FIFO;
- the spec's own backup FIFOs (pop on a refill, push of a returning EV with no vacant slot and
  room): the design's fill and its EVs from the head equal them;
- an event's effect on its slot: ECN / non-last-hop trim of a GOOD slot -> SKIP, a loss / deny with
  no backup -> ASSUMED_BAD / DENIED, a returning EV fills its plane's lowest vacant slot GOOD;
- the selection is the first GOOD slot from the cursor (the spec's scan) and the cursor then points
  past it.
"""
from amaranth.asserts import AnySeq
from amaranth.hdl import Array, Assert, Cat, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.props import after_reset, counters_follow
from formal.runner import prove
from hdl.ev_selector import COUNTERS, KIND, EvSelector, EvSelectorParams
from models.ev_selector import ASSUMED_BAD, DENIED, EVENT_COUNTERS, GOOD, SKIP

PARAMS = EvSelectorParams(n_ev=4, planes=2, backup_depth=3, probe_slots=2, min_active=2, probe_ok_n=2, ev_bits=3,
                          counter_bits=2)


def count(bits):
    return sum(bits)


class SelectorSpec(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        p = PARAMS
        n, planes = p.n_ev, p.planes
        m.submodules.dut = dut = EvSelector(p)
        req = dut.i.payload
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), dut.o.ready.eq(AnySeq(1)),
                     req.as_value().eq(AnySeq(len(req.as_value())))]
        go = dut.i.valid & dut.o.ready
        state, ev, fill = dut.state, dut.ev, dut.fill

        # the spec's copy of the state and request before the last clock edge
        started, went, wanted = Signal(), Signal(), Signal()
        ev_kind, ev_valid, ev_slot = Signal.like(req.event.kind), Signal(), Signal.like(req.event.slot)
        before = [Signal(2, name=f"before{k}") for k in range(n)]
        ev_before = [Signal(p.ev_bits, name=f"ev_before{k}") for k in range(n)]
        fill_before = [Signal.like(f, name=f"fill_before{q}") for q, f in enumerate(fill)]
        m.d.sync += [started.eq(1), went.eq(go), wanted.eq(req.want), ev_kind.eq(req.event.kind),
                     ev_valid.eq(req.event.valid), ev_slot.eq(req.event.slot)]
        m.d.sync += [b.eq(s) for b, s in zip(before, state)] + [b.eq(e) for b, e in zip(ev_before, ev)]
        m.d.sync += [b.eq(f) for b, f in zip(fill_before, fill)]

        def usable(states, plane=None):
            return count((s == GOOD) | (s == SKIP) for k, s in enumerate(states) if plane in (None, k % planes))

        # a selected slot is GOOD
        out = dut.o.payload
        any_good = count(s == GOOD for s in state) != 0
        with m.If(dut.o.valid & out.selected):
            for k in range(n):
                with m.If(out.slot == k):
                    m.d.comb += [Assert(state[k] == GOOD, "a selected slot is GOOD"),
                                 Assert(out.ev == ev[k], "the selected slot's EV is answered")]
        with m.If(dut.o.valid):
            m.d.comb += Assert(out.stall == (req.want & ~any_good), "a stall only when no slot is GOOD")

        with m.If(started & went):
            # at most one SKIP->GOOD per selection
            refill = ev_valid & ((ev_kind == KIND["loss"]) | (ev_kind == KIND["deny"]))
            cleared = [(before[k] == SKIP) & (state[k] == GOOD) & (ev_before[k] == ev[k]) & ~(refill & (ev_slot == k))
                       for k in range(n)]
            m.d.comb += Assert(count(cleared) <= wanted, "at most one SKIP->GOOD per selection")
            # the floor after a loss event
            with m.If(ev_valid & (ev_kind == KIND["loss"]) & (usable(before) >= p.min_active)):
                m.d.comb += Assert(usable(state) >= p.min_active, "the active-EV floor holds after a loss event")
            # per-plane active count while the plane has backups
            for q in range(planes):
                with m.If(fill_before[q] != 0):
                    m.d.comb += Assert(usable(state, q) == usable(before, q),
                                       "per-plane active count constant while the plane has backups")
        for q in range(planes):
            vacant = count((state[k] == ASSUMED_BAD) | (state[k] == DENIED) for k in range(q, n, planes))
            m.d.comb += [Assert((fill[q] == 0) | (vacant == 0), "a plane with backups has no vacant slot"),
                         Assert(fill[q] <= p.backup_depth, "a backup FIFO holds at most backup_depth EVs")]
        # reset: the model's reset state
        cleared = [(state[k] == DENIED) & (ev[k] == 0) for k in range(n)]
        cleared += [f == 0 for f in fill] + [~v for v in dut.pool_valid] + [dut.cursor == 0]
        m.d.comb += Assert(~after_reset(m) | (sum(cleared) == len(cleared)),
                           "a reset leaves every slot DENIED with EV 0, no backups, no probes, the cursor at 0")
        # counters
        e = req.event
        t_live = Signal()                 # the event's slot holds its EV, GOOD or SKIP (a selection's clear
        for k in range(n):                # of a SKIP keeps it usable)
            with m.If(e.slot == k):
                m.d.comb += t_live.eq((ev[k] == e.ev) & ((state[k] == GOOD) | (state[k] == SKIP)))
        t_fill = Signal(range(p.backup_depth + 1))
        for q in range(planes):
            with m.If(e.slot % planes == q):
                m.d.comb += t_fill.eq(fill[q])
        is_kind = {name: go & e.valid & (e.kind == KIND[name]) for name in KIND}
        floor = (t_fill == 0) & (usable(state) <= p.min_active)
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                        {"selected": go & req.want & any_good, "no_ev": go & req.want & ~any_good,
                         "backup": is_kind["backup"], "denied": is_kind["deny"] & t_live,
                         "demoted": is_kind["loss"] & t_live & ~floor,
                         "demote_suppressed": is_kind["loss"] & t_live & floor})
        # ECN and trim, per counter: the event reads the state the selection left. The spec's own scan:
        # from the cursor (architectural state, zero after a reset) in rotation order, the first SKIP
        # passed before the first GOOD (or anywhere when there is none) is cleared to GOOD.
        at = [Signal(range(n), name=f"scan{o}") for o in range(n)]
        m.d.comb += [a.eq((dut.cursor + o) % n) for o, a in enumerate(at)]
        st = [Array(state)[a] for a in at]
        clears = Signal(n)
        for o in range(n):
            passed = [(st[j] == GOOD) | (st[j] == SKIP) for j in range(o)]
            m.d.comb += clears[o].eq(req.want & (st[o] == SKIP) & (count(passed) == 0 if passed else 1))
        t_good = Signal()                 # the event's slot is GOOD once the selection is done
        for k in range(n):
            with m.If(e.slot == k):
                m.d.comb += t_good.eq((state[k] == GOOD) | (count(clears[o] & (at[o] == k) for o in range(n)) != 0))
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                        {"ecn_skip": is_kind["ecn"] & t_live & t_good, "ecn_held": is_kind["ecn"] & t_live & ~t_good,
                         "trim_skip": is_kind["trim"] & t_live & t_good & ~e.last_hop,
                         "trim_kept": is_kind["trim"] & t_live & ~(t_good & ~e.last_hop),
                         "skip_cleared": go & (clears != 0)})
        # the scan's clear and a refill take effect: a SKIP slot the spec's scan clears is GOOD after the
        # cycle (unless the cycle's event names that slot); a live slot lost or denied while its plane
        # has backups holds, GOOD, the EV at the head of that plane's FIFO (architectural state before)
        named = e.valid & ((e.kind == KIND["ecn"]) | (e.kind == KIND["trim"]) | (e.kind == KIND["loss"])
                           | (e.kind == KIND["deny"]))
        clear_due = Signal(n)
        m.d.sync += clear_due.eq(Cat(go & (count(clears[o] & (at[o] == k) for o in range(n)) != 0)
                                     & ~(named & (e.slot == k)) for k in range(n)))
        refill_due, refill_slot, refill_ev = Signal(), Signal.like(e.slot), Signal(p.ev_bits)
        head_ev = Signal(p.ev_bits)
        for q in range(planes):
            with m.If(e.slot % planes == q):
                m.d.comb += head_ev.eq(Array(dut.fifo[q])[dut.head[q]])
        m.d.sync += [refill_due.eq((is_kind["loss"] | is_kind["deny"]) & t_live & (t_fill != 0)),
                     refill_slot.eq(e.slot), refill_ev.eq(head_ev)]
        # the selection is the first GOOD slot from the cursor (the spec's scan), and the cursor moves past it
        pick, found = Signal(range(n)), Signal()
        for o in reversed(range(n)):
            with m.If(st[o] == GOOD):
                m.d.comb += [pick.eq(at[o]), found.eq(1)]
        with m.If(dut.o.valid & out.selected):
            m.d.comb += Assert(found & (out.slot == pick), "the selected slot is the first GOOD one from the cursor")
        moved, cursor_to = Signal(), Signal(range(n))
        m.d.sync += [moved.eq(go & req.want & found), cursor_to.eq(Mux(pick == n - 1, 0, pick + 1))]
        with m.If(moved):
            m.d.comb += Assert(dut.cursor == cursor_to, "the cursor moves past the selected slot")
        counters_follow(m, {"refilled": dut.refilled},
                        {"refilled": (is_kind["loss"] | is_kind["deny"]) & t_live & (t_fill != 0)})
        # the probe pool (the model's rules on the pool's architectural state): a probe of a valid entry
        # holding its EV succeeds (count + 1; the probe_ok_n-th frees the entry) or fails (count 0); a
        # demoting loss puts the slot's EV in the lowest free entry (count 0), none free: probe_full
        pv, pe = Array(dut.pool_valid)[e.index], Array(dut.pool_ev)[e.index]
        po = Array(dut.pool_ok)[e.index]
        hit = is_kind["probe"] & pv & (pe == e.ev)
        full_pool = Cat(*dut.pool_valid).all()
        demoting = is_kind["loss"] & t_live & ~floor
        counters_follow(m, {name: getattr(dut, name) for name in ("probe_fail", "probe_ok", "probe_restored",
                                                                  "probe_full")},
                        {"probe_fail": hit & ~e.ok, "probe_ok": hit & e.ok & (po + 1 < p.probe_ok_n),
                         "probe_restored": hit & e.ok & (po + 1 >= p.probe_ok_n), "probe_full": demoting & full_pool})
        free_at = Signal(range(p.probe_slots))
        for k in reversed(range(p.probe_slots)):
            with m.If(~dut.pool_valid[k]):
                m.d.comb += free_at.eq(k)
        was = {name: Signal.like(v, name=f"probe_{name}") for name, v in
               (("hit", hit), ("ok", e.ok), ("count", po), ("index", e.index), ("ev", e.ev), ("free_at", free_at))}
        was_demoting, was_plane = Signal(), Signal(range(planes))
        m.d.sync += [was[name].eq(v) for name, v in (("hit", hit), ("ok", e.ok), ("count", po), ("index", e.index),
                                                       ("ev", e.ev), ("free_at", free_at))]
        m.d.sync += [was_demoting.eq(demoting & ~full_pool), was_plane.eq(e.slot % planes)]
        for k in range(p.probe_slots):
            with m.If(was["hit"] & (was["index"] == k)):
                with m.If(~was["ok"]):
                    m.d.comb += Assert(dut.pool_valid[k] & (dut.pool_ok[k] == 0), "a failed probe resets its count")
                with m.Elif(was["count"] + 1 < p.probe_ok_n):
                    m.d.comb += Assert(dut.pool_valid[k] & (dut.pool_ok[k] == was["count"] + 1),
                                       "a successful probe counts one")
                with m.Else():
                    m.d.comb += Assert(~dut.pool_valid[k], "the probe_ok_n-th success frees the entry")
            with m.If(was_demoting & (was["free_at"] == k)):
                m.d.comb += Assert(dut.pool_valid[k] & (dut.pool_ev[k] == was["ev"]) & (dut.pool_ok[k] == 0)
                                   & (dut.pool_plane[k] == was_plane),
                                   "a demoted EV enters the lowest free pool entry, count 0")
        # a pool entry no probe names and no demotion fills keeps its contents
        pool = [Cat(dut.pool_valid[k], dut.pool_ev[k], dut.pool_plane[k], dut.pool_ok[k])
                for k in range(p.probe_slots)]
        pool_was = [Signal.like(x, name=f"pool_was{k}") for k, x in enumerate(pool)]
        m.d.sync += [w.eq(x) for w, x in zip(pool_was, pool)]
        went_now = Signal()
        m.d.sync += went_now.eq(go)
        for k in range(p.probe_slots):
            named_k = (was["hit"] & (was["index"] == k)) | (was_demoting & (was["free_at"] == k))
            with m.If(started & (~went_now | ~named_k)):
                m.d.comb += Assert(pool[k] == pool_was[k], "a pool entry no event names keeps its contents")
        # backup_full: an EV returns to a plane (backup, or a restoring probe) with no vacant slot and a full FIFO
        ret_plane = Mux(is_kind["backup"], e.plane, Array(dut.pool_plane)[e.index])
        returns = is_kind["backup"] | (hit & e.ok & (po + 1 >= p.probe_ok_n))
        vacancy = Cat(*(((state[k] == ASSUMED_BAD) | (state[k] == DENIED)) & (ret_plane == k % planes)
                        for k in range(n))).any()
        counters_follow(m, {"backup_full": dut.backup_full},
                        {"backup_full": returns & ~vacancy & (Array(fill)[ret_plane] == p.backup_depth)})
        # the event's effect on its slot: ECN/trim of a GOOD slot -> SKIP; a loss or deny with no backup
        # leaves it ASSUMED_BAD / DENIED; a returning EV fills its plane's lowest vacant slot, GOOD
        skip_due = (is_kind["ecn"] & t_live & t_good) | (is_kind["trim"] & t_live & t_good & ~e.last_hop)
        vacate_due = ((is_kind["loss"] & t_live & ~floor) | (is_kind["deny"] & t_live)) & (t_fill == 0)
        fill_slot = Signal(range(n))
        for k in reversed(range(n)):
            with m.If(((state[k] == ASSUMED_BAD) | (state[k] == DENIED)) & (ret_plane == k % planes)):
                m.d.comb += fill_slot.eq(k)
        eff = {name: Signal(name=f"effect_{name}") for name in ("skip", "vacate", "loss", "fill")}
        eff_slot, eff_fill, eff_ev = Signal(range(n)), Signal(range(n)), Signal(p.ev_bits)
        m.d.sync += [eff["skip"].eq(skip_due), eff["vacate"].eq(vacate_due), eff["loss"].eq(is_kind["loss"]),
                     eff["fill"].eq(returns & vacancy), eff_slot.eq(e.slot), eff_fill.eq(fill_slot),
                     eff_ev.eq(Mux(is_kind["backup"], e.ev, pe))]
        for k in range(n):
            with m.If(eff["skip"] & (eff_slot == k)):
                m.d.comb += Assert(state[k] == SKIP, "an ECN or non-last-hop trim of a GOOD slot leaves it SKIP")
            with m.If(eff["vacate"] & (eff_slot == k)):
                m.d.comb += Assert(state[k] == Mux(eff["loss"], ASSUMED_BAD, DENIED),
                                   "a loss / deny with no backup leaves the slot ASSUMED_BAD / DENIED")
            with m.If(eff["fill"] & (eff_fill == k)):
                m.d.comb += Assert((state[k] == GOOD) & (ev[k] == eff_ev),
                                   "a returning EV fills its plane's lowest vacant slot, GOOD")
        # the spec's own backup FIFOs: a refill pops the plane's head, a returning EV with no vacant slot
        # and room is pushed at the tail; the design's FIFO (fill, and the EVs from its head) holds them
        D = p.backup_depth
        sq = [[Signal(p.ev_bits, name=f"spec_fifo{q}_{i}") for i in range(D)] for q in range(planes)]
        sn = [Signal(range(D + 1), name=f"spec_fill{q}") for q in range(planes)]
        pop_due = (is_kind["loss"] | is_kind["deny"]) & t_live & (t_fill != 0)
        push_due = returns & ~vacancy & (Array(fill)[ret_plane] < D)
        for q in range(planes):
            with m.If(pop_due & (e.slot % planes == q)):
                m.d.sync += [sn[q].eq(sn[q] - 1)] + [sq[q][i].eq(sq[q][i + 1]) for i in range(D - 1)]
            with m.If(push_due & (ret_plane == q)):
                m.d.sync += sn[q].eq(sn[q] + 1)
                for i in range(D):
                    with m.If(sn[q] == i):
                        m.d.sync += sq[q][i].eq(Mux(is_kind["backup"], e.ev, pe))
            m.d.comb += Assert(fill[q] == sn[q], "a backup FIFO holds as many EVs as the spec's")
            m.d.comb += Assert(dut.head[q] < D, "a backup FIFO's head is one of its entries")
            for i in range(D):
                with m.If(i < sn[q]):
                    m.d.comb += Assert(Array(dut.fifo[q])[(dut.head[q] + i) % D] == sq[q][i],
                                       "a backup FIFO holds the spec's EVs in order from its head")
        for k in range(n):
            with m.If(clear_due[k]):
                m.d.comb += Assert(state[k] == GOOD, "a SKIP slot the selection's scan passes becomes GOOD")
            with m.If(refill_due & (refill_slot == k)):
                m.d.comb += Assert((state[k] == GOOD) & (ev[k] == refill_ev),
                                   "a lost or denied slot is refilled GOOD with its plane's next backup EV")
        top = (1 << p.counter_bits) - 1
        ev_before = [Signal(p.counter_bits, name=f"{name}_was") for name in EVENT_COUNTERS]
        m.d.sync += [b.eq(getattr(dut, name)) for b, name in zip(ev_before, EVENT_COUNTERS)]
        room = Signal()
        m.d.sync += room.eq(sum(getattr(dut, name) == top for name in EVENT_COUNTERS) == 0)
        taken = Signal()
        m.d.sync += taken.eq(go & req.event.valid)
        with m.If(room):
            grown = sum((getattr(dut, name) - b)[:p.counter_bits] for name, b in zip(EVENT_COUNTERS, ev_before))
            m.d.comb += Assert(grown == taken, "every event taken increments exactly one event counter")
        m.d.comb += [Cover(started & went & wanted & ev_valid & (ev_kind == KIND["loss"])
                           & (usable(state) == p.min_active)),
                     Cover(dut.o.valid & out.selected & (fill[0] != 0)),
                     Cover(ResetSignal() & (fill[0] != 0) & (dut.selected != 0))]
        return m


def test_ev_selector_proof():
    prove(SelectorSpec(), "ev_selector", depth=3, mode="prove")


def test_ev_selector_cover():
    """Not vacuous: a loss down to the floor; a selection while a plane has backups."""
    prove(SelectorSpec(), "ev_selector_cover", depth=10, mode="cover")
