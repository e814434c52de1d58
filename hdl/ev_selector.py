"""MRC entropy-value selector (SPEC section 5): one EV per cycle from the active set, per-EV feedback."""
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from models.ev_selector import (
    ASSUMED_BAD,
    COUNTERS,
    DENIED,
    EVENT_KINDS,
    GOOD,
    SKIP,
    EvSelectorParams,
)
from models.params import check

__all__ = ["EvSelector", "EvSelectorParams", "COUNTERS", "EVENT_KINDS", "request_layout", "answer_layout"]

KIND = {name: k for k, name in enumerate(EVENT_KINDS)}


def request_layout(params):
    """One cycle's input: ``want`` (select an EV) and at most one feedback ``event`` (``kind`` indexes
    ``EVENT_KINDS``; ``slot``/``ev``/``last_hop`` for slot events, ``index``/``ok`` for probes,
    ``plane`` for backups)."""
    p = params
    event = data.StructLayout({"valid": 1, "kind": range(len(EVENT_KINDS)), "slot": range(p.n_ev),
                               "ev": p.ev_bits, "last_hop": 1, "index": range(p.probe_slots), "ok": 1,
                               "plane": range(p.planes)})
    return data.StructLayout({"want": 1, "event": event})


def answer_layout(params):
    """The same cycle's output: ``selected`` (an EV is chosen: ``slot``, ``ev``, ``plane``), ``stall``
    (``want`` and no GOOD slot: ``no_ev``) and ``retransmit`` (the event is a trimmed NACK)."""
    p = params
    return data.StructLayout({"selected": 1, "stall": 1, "slot": range(p.n_ev), "ev": p.ev_bits,
                              "plane": range(p.planes), "retransmit": 1})


def _first(m, bits, name):
    """(any, index of the lowest set bit) of ``bits`` (a priority encoder)."""
    found, index = Signal(name=f"{name}_any"), Signal(range(max(len(bits), 2)), name=f"{name}_at")
    for k in reversed(range(len(bits))):
        with m.If(bits[k]):
            m.d.comb += [found.eq(1), index.eq(k)]
    return found, index


class EvSelector(wiring.Component):
    """Per-QP EV selection and feedback of MRC, cycle for cycle the ``EvSelectorModel`` (its docstring
    is the contract: state, selection, the event rules and their order, counters).

    Interface: ``i`` carries one ``request_layout`` word per cycle and ``o`` answers it in the same
    cycle (``o.valid = i.valid``, ``i.ready = o.ready``; combinational from the registered state:
    zero latency). A transfer is one model ``step``; the state advances on it only.

    Microarchitecture: slot EVs and states, the cursor, the backup FIFOs (a circular buffer per plane,
    at most one push or pop per cycle) and the probe pool are flip-flops. The scan is two rotating
    priority encoders from the cursor (first GOOD, first SKIP); the SKIP is cleared when it comes
    before the GOOD in scan order (or there is no GOOD). The event then acts on the state the
    selection left, in the same cycle; the pool's lowest free entry and a plane's lowest vacant slot
    are priority encoders; the usable count (for the ``min_active`` floor) is a popcount.

    *Chosen* (the model raises instead): an event with ``kind`` outside ``EVENT_KINDS`` or a ``slot``
    outside the slots counts as ``stale`` and changes nothing. Counters: one ``Out`` port per name in
    ``COUNTERS``, saturating.
    """

    def __init__(self, params=None):
        p = self.params = check(params, EvSelectorParams)
        signature = {"i": In(stream.Signature(request_layout(p))), "o": Out(stream.Signature(answer_layout(p)))}
        signature.update({name: Out(p.counter_bits) for name in COUNTERS})
        super().__init__(signature)
        n, planes = p.n_ev, p.planes
        self.state = [Signal(2, init=DENIED, name=f"state{k}") for k in range(n)]
        self.ev = [Signal(p.ev_bits, name=f"ev{k}") for k in range(n)]
        self.cursor = Signal(range(n))
        self.fifo = [[Signal(p.ev_bits, name=f"backup{q}_{d}") for d in range(p.backup_depth)] for q in range(planes)]
        self.head = [Signal(range(p.backup_depth), name=f"head{q}") for q in range(planes)]
        self.fill = [Signal(range(p.backup_depth + 1), name=f"fill{q}") for q in range(planes)]
        self.pool_valid = [Signal(name=f"pool_valid{k}") for k in range(p.probe_slots)]
        self.pool_ev = [Signal(p.ev_bits, name=f"pool_ev{k}") for k in range(p.probe_slots)]
        self.pool_plane = [Signal(range(planes), name=f"pool_plane{k}") for k in range(p.probe_slots)]
        self.pool_ok = [Signal(range(p.probe_ok_n + 1), name=f"pool_ok{k}") for k in range(p.probe_slots)]

    def elaborate(self, platform):
        m = Module()
        p = self.params
        n, planes, depth = p.n_ev, p.planes, p.backup_depth
        req, ans = self.i.payload, self.o.payload
        e = req.event
        go = Signal()
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready), go.eq(self.i.valid & self.o.ready)]
        plane_of = Array(Const(k % planes, range(planes)) for k in range(n))

        # --- selection: first GOOD and first SKIP in scan order from the cursor ---
        ahead, good, skip = Signal(n), Signal(n), Signal(n)              # ahead: at or after the cursor
        m.d.comb += [ahead.eq(Cat(Const(k) >= self.cursor for k in range(n))),
                     good.eq(Cat(s == GOOD for s in self.state)), skip.eq(Cat(s == SKIP for s in self.state))]
        g_hi, g_hi_at = _first(m, good & ahead, "good_hi")
        g_any, g_lo_at = _first(m, good, "good")
        s_hi, s_hi_at = _first(m, skip & ahead, "skip_hi")
        s_any, s_lo_at = _first(m, skip, "skip")
        chosen, cleared = Signal(range(n)), Signal(range(n))
        m.d.comb += [chosen.eq(Mux(g_hi, g_hi_at, g_lo_at)), cleared.eq(Mux(s_hi, s_hi_at, s_lo_at))]
        # the SKIP comes first in scan order: on the same side of the cursor and lower, or ahead of it
        # while the GOOD wrapped around
        before = Signal()
        m.d.comb += before.eq(Mux(s_hi == g_hi, cleared < chosen, s_hi))
        want = req.want
        select, clear = Signal(), Signal()
        m.d.comb += [select.eq(want & g_any), clear.eq(want & s_any & (~g_any | before))]
        m.d.comb += [ans.selected.eq(select), ans.stall.eq(want & ~g_any), ans.slot.eq(chosen),
                     ans.ev.eq(Array(self.ev)[chosen]), ans.plane.eq(plane_of[chosen])]

        # --- the state the selection leaves; the event reads it ---
        post = [Signal(2, name=f"post{k}") for k in range(n)]
        for k in range(n):
            m.d.comb += post[k].eq(Mux(clear & (cleared == k), GOOD, self.state[k]))
        usable, vacant = Signal(n), Signal(n)
        m.d.comb += [usable.eq(Cat((s == GOOD) | (s == SKIP) for s in post)),
                     vacant.eq(Cat((s == ASSUMED_BAD) | (s == DENIED) for s in post))]
        n_usable = Signal(range(n + 1))
        m.d.comb += n_usable.eq(sum(usable[k] for k in range(n)))

        kind = {name: Signal(name=f"is_{name}") for name in EVENT_KINDS}
        for name in EVENT_KINDS:
            m.d.comb += kind[name].eq(e.valid & (e.kind == KIND[name]))
        slot_ok = e.slot < n
        t_state, t_ev, t_plane = Array(post)[e.slot], Array(self.ev)[e.slot], plane_of[e.slot]
        live = Signal()
        m.d.comb += live.eq(slot_ok & (t_ev == e.ev) & ((t_state == GOOD) | (t_state == SKIP)))
        has_backup = Array(f != 0 for f in self.fill)
        t_backup = Signal()
        m.d.comb += t_backup.eq(has_backup[t_plane])
        entry_valid, entry_ev = Array(self.pool_valid)[e.index], Array(self.pool_ev)[e.index]
        entry_ok, entry_plane = Array(self.pool_ok)[e.index], Array(self.pool_plane)[e.index]
        probe_match = Signal()
        m.d.comb += probe_match.eq(entry_valid & (entry_ev == e.ev))

        c = {name: Signal(name=f"c_{name}") for name in COUNTERS}      # this cycle's counter events
        demote, vacate, ret = Signal(), Signal(), Signal()               # ret: an EV returns to a plane
        ret_plane, ret_ev = Signal(range(planes)), Signal(p.ev_bits)
        m.d.comb += [c["selected"].eq(select), c["no_ev"].eq(want & ~g_any), c["skip_cleared"].eq(clear),
                     ans.retransmit.eq(kind["trim"])]
        with m.If(kind["backup"]):
            m.d.comb += [c["backup"].eq(1), ret.eq(1), ret_plane.eq(e.plane), ret_ev.eq(e.ev)]
        with m.Elif(kind["probe"]):
            with m.If(~probe_match):
                m.d.comb += c["stale"].eq(1)
            with m.Elif(~e.ok):
                m.d.comb += c["probe_fail"].eq(1)
            with m.Elif(entry_ok + 1 < p.probe_ok_n):
                m.d.comb += c["probe_ok"].eq(1)
            with m.Else():
                m.d.comb += [c["probe_restored"].eq(1), ret.eq(1), ret_plane.eq(entry_plane), ret_ev.eq(entry_ev)]
        with m.Elif(kind["trim"]):
            with m.If(live & (t_state == GOOD) & ~e.last_hop):
                m.d.comb += c["trim_skip"].eq(1)
            with m.Elif(live):
                m.d.comb += c["trim_kept"].eq(1)
            with m.Else():
                m.d.comb += c["stale"].eq(1)
        with m.Elif(~live | ~(kind["ecn"] | kind["loss"] | kind["deny"])):
            m.d.comb += c["stale"].eq(e.valid)
        with m.Elif(kind["ecn"]):
            m.d.comb += c["ecn_skip"].eq(t_state == GOOD)
            m.d.comb += c["ecn_held"].eq(t_state == SKIP)
        with m.Elif(kind["loss"]):
            with m.If(~t_backup & (n_usable <= p.min_active)):
                m.d.comb += c["demote_suppressed"].eq(1)
            with m.Else():
                m.d.comb += [c["demoted"].eq(1), demote.eq(1), vacate.eq(1)]
        with m.Else():
            m.d.comb += [c["denied"].eq(1), vacate.eq(1)]

        # lowest free pool entry; lowest vacant slot of the returning plane
        free_any, free_at = _first(m, Cat(~v for v in self.pool_valid), "free")
        m.d.comb += c["probe_full"].eq(demote & ~free_any)
        in_plane = Signal(n)                      # vacant slots of the returning plane
        m.d.comb += in_plane.eq(Cat(vacant[k] & (ret_plane == k % planes) for k in range(n)))
        fill_any, fill_at = _first(m, in_plane, "fill")
        ret_fill = Array(self.fill)[ret_plane]
        push = Signal()
        m.d.comb += [push.eq(ret & ~fill_any & (ret_fill < depth)),
                     c["backup_full"].eq(ret & ~fill_any & (ret_fill == depth)),
                     c["refilled"].eq(vacate & t_backup)]

        head_ev = [Signal(p.ev_bits, name=f"head_ev{q}") for q in range(planes)]
        for q in range(planes):
            m.d.comb += head_ev[q].eq(Array(self.fifo[q])[self.head[q]])

        # --- state updates: the selection's, then the event's (later assignments win) ---
        with m.If(go):
            with m.If(select):
                m.d.sync += self.cursor.eq(Mux(chosen == n - 1, 0, chosen + 1))
            for k in range(n):
                here = e.slot == k
                with m.If(clear & (cleared == k)):
                    m.d.sync += self.state[k].eq(GOOD)
                with m.If(here & (c["ecn_skip"] | c["trim_skip"])):
                    m.d.sync += self.state[k].eq(SKIP)
                with m.If(here & vacate):
                    q = k % planes
                    with m.If(t_backup):
                        m.d.sync += [self.ev[k].eq(head_ev[q]), self.state[k].eq(GOOD)]
                    with m.Else():
                        m.d.sync += self.state[k].eq(Mux(kind["loss"], ASSUMED_BAD, DENIED))
                with m.If(ret & fill_any & (fill_at == k)):
                    m.d.sync += [self.ev[k].eq(ret_ev), self.state[k].eq(GOOD)]
            for q in range(planes):
                pop = vacate & t_backup & (t_plane == q)
                with m.If(pop):
                    m.d.sync += [self.head[q].eq(Mux(self.head[q] == depth - 1, 0, self.head[q] + 1)),
                                 self.fill[q].eq(self.fill[q] - 1)]
                with m.If(push & (ret_plane == q)):
                    tail = self.head[q] + self.fill[q]
                    for d in range(depth):
                        with m.If((tail == d) | (tail == d + depth)):
                            m.d.sync += self.fifo[q][d].eq(ret_ev)
                    m.d.sync += self.fill[q].eq(self.fill[q] + 1)
            for k in range(p.probe_slots):
                here = e.index == k
                with m.If(demote & free_any & (free_at == k)):
                    m.d.sync += [self.pool_valid[k].eq(1), self.pool_ev[k].eq(t_ev), self.pool_plane[k].eq(t_plane),
                                 self.pool_ok[k].eq(0)]
                with m.If(here & c["probe_fail"]):
                    m.d.sync += self.pool_ok[k].eq(0)
                with m.If(here & c["probe_ok"]):
                    m.d.sync += self.pool_ok[k].eq(self.pool_ok[k] + 1)
                with m.If(here & c["probe_restored"]):
                    m.d.sync += self.pool_valid[k].eq(0)

        # --- counters ---
        for name in COUNTERS:
            count_event(m, getattr(self, name), go & c[name], overflow="saturate")
        return m
