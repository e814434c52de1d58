"""Cycle-accurate golden model of the MRC EV selector (SPEC section 5), one per QP at the NIC.

State: ``n_ev`` active slots ``{ev, state}`` (slot ``i`` belongs to plane ``i % planes``; states
GOOD, SKIP, ASSUMED_BAD, DENIED; GOOD and SKIP are *usable*, the other two *vacant*), one backup
FIFO per plane (``backup_depth`` EVs), and a probe pool of ``probe_slots`` entries
``{ev, plane, ok}``.

One transfer (``tick(want, event)``), *chosen* order: the selection reads the state at the start of
the cycle; the event is then applied to the state the selection left (its SKIP->GOOD included).
- Selection (when ``want``): scan the slots from the rotating cursor; the first GOOD slot is
  selected and the cursor moves past it. The first SKIP slot passed on the way becomes GOOD but is
  not used (at most one SKIP->GOOD per selection, counted ``skip_cleared``). No GOOD slot: stall,
  ``no_ev``, cursor unchanged (a SKIP cleared on the way stays cleared). ``want`` low: no scan.
- Events (at most one per cycle): a dict ``{"kind", ...}``. Slot events name ``slot`` and the
  ``ev`` the feedback echoes; they act only if the slot still holds that EV and is usable, else
  ``stale`` (trim still requests the retransmit).
  * ``ecn``: GOOD -> SKIP (``ecn_skip``); SKIP stays (no re-arm, ``ecn_held``).
  * ``trim`` (``last_hop``): always a retransmit request (output ``retransmit``); a GOOD slot goes
    SKIP for a non-last-hop trim (``trim_skip``), otherwise untouched (``trim_kept``). A trim never
    demotes.
  * ``loss`` (untrimmed): the EV goes to the probe pool (lowest free entry; pool full -> discarded,
    ``probe_full``) and the slot is refilled GOOD from its plane's backup FIFO (``refilled``) or,
    with no backup, left ASSUMED_BAD. If that would leave fewer than ``min_active`` usable slots,
    nothing changes (``demote_suppressed``); otherwise ``demoted``.
  * ``probe`` (``index``, ``ev``, ``ok``): on a matching pool entry, success increments its count
    (``probe_ok``); the ``probe_ok_n``-th success frees the entry and returns the EV to its plane
    (``probe_restored``); a failure resets the count (``probe_fail``). Mismatch or empty: ``stale``.
  * ``deny`` (controller): the slot's EV is retired for good (not probed); the slot is refilled
    from its plane's backups or left DENIED (``denied``). No floor check: the controller decides.
  * ``backup`` (``plane``, ``ev``; control plane): the EV returns to the plane (``backup``).
  An EV *returning to a plane* (``backup``, ``probe_restored``) fills the plane's lowest vacant slot
  (GOOD) if any, else joins the tail of the plane's FIFO; FIFO full -> discarded (``backup_full``).
  So a plane with backups has no vacant slot, and its usable count stays constant while backups
  last. After ``reset`` every slot is DENIED (vacant) and every FIFO empty: the first
  ``n_ev / planes`` ``backup`` events of a plane fill its slots.
- The controller's UNKNOWN state is an EV in the probe pool; ASSUMED_BAD is a slot left vacant.
- Microarchitecture the RTL keeps: slot states and EVs in flip-flops (the scan reads every slot in
  the cycle); the selection is combinational from the registered state and ``want`` (zero latency:
  the EV is on the output in the cycle ``want`` is high); the event's result, including
  ``retransmit``, is also shown in its own cycle; the pool's lowest free entry and a plane's
  lowest vacant slot are priority encoders; each FIFO pops or pushes at most once per cycle.
- Counters saturate at ``2**counter_bits - 1``. Conservation: cycles with ``want`` = ``selected``
  + ``no_ev``; events = the sum of ``EVENT_COUNTERS`` (one each). ``EFFECTS`` count side effects.
"""
import collections
from dataclasses import dataclass

from models import wire
from models.contract import Counters
from models.params import Params, check, param

__all__ = ["EvSelectorParams", "EvSelectorModel", "GOOD", "SKIP", "ASSUMED_BAD", "DENIED", "STATES",
           "SELECT_COUNTERS", "EVENT_COUNTERS", "EFFECTS", "COUNTERS", "EVENT_KINDS"]

#: Slot states (2-bit encoding in this order).
GOOD, SKIP, ASSUMED_BAD, DENIED = 0, 1, 2, 3
STATES = ("GOOD", "SKIP", "ASSUMED_BAD", "DENIED")
EVENT_KINDS = ("ecn", "trim", "loss", "probe", "deny", "backup")
SELECT_COUNTERS = ("selected", "no_ev")
EVENT_COUNTERS = ("ecn_skip", "ecn_held", "trim_skip", "trim_kept", "demoted", "demote_suppressed",
                  "probe_ok", "probe_restored", "probe_fail", "denied", "backup", "stale")
EFFECTS = ("skip_cleared", "refilled", "probe_full", "backup_full")
COUNTERS = SELECT_COUNTERS + EVENT_COUNTERS + EFFECTS


@dataclass(frozen=True, kw_only=True)
class EvSelectorParams(Params):
    """Parameters of ``EvSelector`` and its model."""
    n_ev: int = param(16, lo=1, hi=256, doc="active EV slots")
    planes: int = param(2, lo=1, hi=16, doc="planes; slot i is on plane i % planes")
    backup_depth: int = param(4, lo=1, hi=256, doc="backup FIFO entries per plane")
    probe_slots: int = param(8, lo=1, hi=256, doc="probe pool entries")
    min_active: int = param(8, lo=0, doc="usable slots a loss event never goes below")
    probe_ok_n: int = param(3, lo=1, hi=255, doc="probe successes that resurrect an EV")
    ev_bits: int = param(wire.EV_BITS, lo=1, hi=wire.EV_BITS, doc="EV width")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width (counters saturate)")

    def validate(self):
        if self.n_ev % self.planes:
            self.fail(f"n_ev = {self.n_ev} must be a multiple of planes = {self.planes}")
        if self.min_active > self.n_ev:
            self.fail(f"min_active = {self.min_active} must be <= n_ev = {self.n_ev}")


class EvSelectorModel:
    """Takes the ``EvSelectorParams`` of ``EvSelector``; a cycle model (``models/contract.py``).

    ``step(inputs)`` is one clock cycle of the Component's ports: ``o`` answers the request on ``i`` in
    the same cycle (``o.valid = i.valid``, ``i.ready = o.ready``; ``slot``, ``ev`` and ``plane`` only
    when ``selected``), and a transfer is one ``tick``. An event whose ``kind`` code is past
    ``EVENT_KINDS`` is what the RTL *chose*: ``stale``, nothing else changes.

    ``tick(want, event=None)`` is one transfer: it returns the answer ``{"valid", "slot", "ev",
    "plane", "stall", "retransmit"}`` (``valid``: an EV was selected; ``stall``: ``want`` and none)
    and then advances the state as the clock edge does. ``slots``, ``backups`` and ``pool`` are the
    state; ``counters`` (``Counters``) the counter ports.
    """

    KIND = "cycle"

    def __init__(self, params=None):
        self.params = check(params, EvSelectorParams)
        self.counters = Counters(COUNTERS, self.params.counter_bits, "saturate")
        self.reset()

    def reset(self):
        p = self.params
        self.slots = [[0, DENIED] for _ in range(p.n_ev)]          # [ev, state]
        self.backups = [collections.deque() for _ in range(p.planes)]
        self.pool = [None] * p.probe_slots                         # [ev, plane, ok] or None
        self.cursor = 0
        self.counters.clear()

    def plane_of(self, slot):
        return slot % self.params.planes

    def usable(self, plane=None):
        """Usable (GOOD or SKIP) slots, of one plane or of all."""
        return sum(1 for i, (_, s) in enumerate(self.slots)
                   if s in (GOOD, SKIP) and (plane is None or self.plane_of(i) == plane))

    def _select(self):
        n, cleared = self.params.n_ev, None
        for k in range(n):
            i = (self.cursor + k) % n
            state = self.slots[i][1]
            if state == GOOD:
                return i, cleared
            if state == SKIP and cleared is None:
                cleared = i
        return None, cleared

    def _return(self, plane, ev):
        """An EV returns to ``plane``: its lowest vacant slot, else the FIFO's tail, else discarded."""
        for i in range(plane, self.params.n_ev, self.params.planes):
            if self.slots[i][1] in (ASSUMED_BAD, DENIED):
                self.slots[i] = [ev, GOOD]
                return
        if len(self.backups[plane]) < self.params.backup_depth:
            self.backups[plane].append(ev)
        else:
            self.counters.add("backup_full")

    def _vacate(self, slot, state):
        """Refill ``slot`` from its plane's FIFO, or leave it vacant in ``state``."""
        fifo = self.backups[self.plane_of(slot)]
        if fifo:
            self.slots[slot] = [fifo.popleft(), GOOD]
            self.counters.add("refilled")
        else:
            self.slots[slot][1] = state

    def _event(self, e):
        p, kind = self.params, e["kind"]
        if kind not in EVENT_KINDS:
            raise ValueError(f"event kind {kind!r}: must be one of {', '.join(EVENT_KINDS)}")
        if kind == "backup":
            if not 0 <= e["plane"] < p.planes:
                raise ValueError(f"event plane = {e['plane']!r}: must be in 0..{p.planes - 1}")
            self._check_ev(e["ev"])
            self.counters.add("backup")
            self._return(e["plane"], e["ev"])
            return
        if kind == "probe":
            if not 0 <= e["index"] < p.probe_slots:
                raise ValueError(f"event index = {e['index']!r}: must be in 0..{p.probe_slots - 1}")
            entry = self.pool[e["index"]]
            if entry is None or entry[0] != e["ev"]:
                self.counters.add("stale")
            elif not e["ok"]:
                entry[2] = 0
                self.counters.add("probe_fail")
            elif entry[2] + 1 < p.probe_ok_n:
                entry[2] += 1
                self.counters.add("probe_ok")
            else:
                self.pool[e["index"]] = None
                self.counters.add("probe_restored")
                self._return(entry[1], entry[0])
            return
        slot = e["slot"]
        if not 0 <= slot < p.n_ev:
            raise ValueError(f"event slot = {slot!r}: must be in 0..{p.n_ev - 1}")
        ev, state = self.slots[slot]
        live = ev == e["ev"] and state in (GOOD, SKIP)
        if kind == "trim":
            if live and state == GOOD and not e["last_hop"]:
                self.slots[slot][1] = SKIP
                self.counters.add("trim_skip")
            elif live:
                self.counters.add("trim_kept")
            else:
                self.counters.add("stale")
            return
        if not live:
            self.counters.add("stale")
        elif kind == "ecn":
            if state == GOOD:
                self.slots[slot][1] = SKIP
            self.counters.add("ecn_skip" if state == GOOD else "ecn_held")
        elif kind == "loss":
            plane = self.plane_of(slot)
            if not self.backups[plane] and self.usable() - 1 < p.min_active:
                self.counters.add("demote_suppressed")
            else:
                self.counters.add("demoted")
                free = next((j for j, x in enumerate(self.pool) if x is None), None)
                if free is None:
                    self.counters.add("probe_full")
                else:
                    self.pool[free] = [ev, plane, 0]
                self._vacate(slot, ASSUMED_BAD)
        else:                                                     # deny
            self.counters.add("denied")
            self._vacate(slot, DENIED)

    def _check_ev(self, ev):
        if not isinstance(ev, int) or not 0 <= ev < 1 << self.params.ev_bits:
            raise ValueError(f"event ev = {ev!r}: must be an ev_bits = {self.params.ev_bits} bit value")

    def step(self, inputs):
        request = inputs["i__payload"]
        outputs = {"i__ready": inputs["o__ready"], "o__valid": inputs["i__valid"]}
        if request is None:
            return outputs
        event, undefined = self.decode(request["event"])
        if inputs["o__ready"]:
            answer = self.tick(request["want"], event)
            if undefined:
                self.counters.add("stale")
        else:
            answer = self._answer(request["want"], event)[0]
        payload = {"selected": answer["valid"], "stall": answer["stall"], "retransmit": answer["retransmit"]}
        if answer["valid"]:
            payload.update(slot=answer["slot"], ev=answer["ev"], plane=answer["plane"])
        outputs["o__payload"] = payload
        return outputs

    @staticmethod
    def decode(field):
        """(the event of a request's ``event`` field, or None; whether its ``kind`` code is undefined)."""
        undefined = bool(field["valid"]) and field["kind"] >= len(EVENT_KINDS)
        return ({**field, "kind": EVENT_KINDS[field["kind"]]} if field["valid"] and not undefined else None,
                undefined)

    def _answer(self, want, event):
        """(the answer to ``want`` and ``event`` in the current state, the SKIP slot the scan passed)."""
        chosen, cleared = self._select() if want else (None, None)
        return {"valid": chosen is not None, "slot": chosen, "stall": bool(want) and chosen is None,
                "ev": None if chosen is None else self.slots[chosen][0],
                "plane": None if chosen is None else self.plane_of(chosen),
                "retransmit": event is not None and event["kind"] == "trim"}, cleared

    def tick(self, want, event=None):
        out, cleared = self._answer(want, event)
        chosen = out["slot"]
        # The clock edge: the selection's effects, then the event's.
        if want:
            self.counters.add("selected" if chosen is not None else "no_ev")
        if chosen is not None:
            self.cursor = (chosen + 1) % self.params.n_ev
        if cleared is not None:
            self.slots[cleared][1] = GOOD
            self.counters.add("skip_cleared")
        if event is not None:
            self._event(event)
        return out
