"""The MRC scenario's closed loop: NIC senders and receivers and a two-tier, two-plane fabric.

Setting (*chosen*, after the paper's production fabric, scaled down): 2 planes x 4 spines x 8
leaves; a sender on leaf 0 and a receiver on leaf 7. The packet's outer DA is the uSID path
``[leaf 0, spine (plane, s), leaf 7, host function + EV tag]``; the EV picks the spine and plane
through the EV expander's profile ``PROFILE``. Leaf 0 (one per plane, the same uSID in
both planes) is the ``UsidForwarder``: it shifts its uSID off and looks the spine uSID up to one
of 8 uplinks (``plane * 4 + spine``), with the uplink's data/priority queue depths as inputs, so
it marks ECN on the ramp and trims on a full data queue. Each uplink sends one packet every
``SERVICE`` cycles (priority queue first); the rest of the path is uncongested (``LATENCY``).

Senders: one QP per ``EvSelector`` (16 EVs, 8 per plane, 4 backups per plane). A packet goes on
the selected EV; the receiver echoes CE per EV (``ecn`` event), NACKs a trimmed packet (``trim``,
retransmitted at once) and the sender detects an untrimmed loss after ``RTO`` (``loss``,
retransmitted). Probes on the pool's EVs every ``PROBE_EVERY`` cycles report success when their
path is up (and not dropped by the injected loss). At most one feedback event per cycle enters a
selector. Goodput: new packets delivered per cycle.

The loop is written against an ``engine`` that answers, per cycle, the selector of QP 0, the
expander and the forwarder: ``ModelEngine`` uses the golden models; the scenario's cocotb test
drives the RTL and checks every answer against the same models. Pipeline per packet: selection
(cycle t), expansion (t+1, answered t+2), forwarding (t+3, answered t+4).
"""
import collections
import heapq
import random

from models import wire
from models.ev_expander import EvExpanderModel, EvExpanderParams, profile
from models.ev_selector import GOOD, SKIP, EvSelectorModel, EvSelectorParams
from models.headers import mrc_packet, usid_address
from models.usid_forwarder import UsidForwarderModel, UsidForwarderParams

LOC, LEAF0, SPINE, LEAF7, HOST = 0xFC00_0000, 0x0A00, 0x0B00, 0x0C07, 0xD000
PLANES, SPINES = 2, 4
PATHS = PLANES * SPINES
#: Expander profile (OCP SRv6: a 32-bit locator, four 16-bit uSIDs; fields (width, init_val, min_val,
#: max_val, mask)): fixed locator, leaf 0 and leaf 7; 3 EV bits pick {plane, spine}; 8 EV bits tag.
PROFILE = profile(wire.EV_FMT_MODE_SRV6, [32, 16, 16, 16, 16],
                  [(32, LOC, 0, 0, 0), (16, LEAF0, 0, 0, 0), (16, SPINE, 0, 7, 0x0007), (16, LEAF7, 0, 0, 0),
                   (16, HOST, 0, 0xFF, 0x00FF)])
EV_SHIFT = 32 - 11
SEL = EvSelectorParams(n_ev=16, planes=PLANES, backup_depth=4, probe_slots=8, min_active=4, probe_ok_n=3)
#: The selector's 32-bit EVs; the expansion is the 128-bit DA.
EXP = EvExpanderParams(ev_bits=wire.EV_BITS, exp_bits=128, max_fields=5)
FWD = UsidForwarderParams(ports=PATHS, locator=LOC, my_usid=LEAF0, table_entries=PATHS, data_capacity=16,
                          prio_capacity=8, depth_bits=8, ecn_kmin=4, ecn_span_log2=3)
SERVICE, LATENCY, ACK, RTO, PROBE_EVERY, PROBE_LATENCY = 3, 20, 10, 100, 64, 30
PAYLOAD = 256


def ev_of(path, tag):
    return (path << 8 | tag) << EV_SHIFT


def path_of(ev):
    return ev >> (EV_SHIFT + 8) & 7


def descriptor(raw, port, data_depth, prio_depth):
    return {"hdr": int.from_bytes(raw[:wire.MRC_HEADER_BYTES], "little"), "length": len(raw), "port": port,
            "data_depth": data_depth, "prio_depth": prio_depth}


class ModelEngine:
    """The golden models answering for the RTL (also the reference the cocotb engine checks)."""

    def __init__(self):
        self.sel, self.exp, self.fwd = EvSelectorModel(SEL), EvExpanderModel(EXP), UsidForwarderModel(FWD)
        self.exp.process("cfg", PROFILE)
        assert self.exp.counters()["configured"] == 1, "the expander takes PROFILE"
        for k in range(PATHS):
            self.fwd.add_route(LOC << 16 | SPINE | k, k)

    def cycle(self, want, event, ev, packet):
        """One cycle: the selection for (want, event); the expansion of ``ev``; the forwarding of
        ``packet`` = (raw, port, data_depth, prio_depth). Answers: (selection, DA or None, verdict)."""
        sel = self.sel.tick(want, event)
        da = self.exp.process("i", {"ev": ev})["o"][0] if ev is not None else None
        out = self.fwd.forward(*packet) if packet is not None else None
        return sel, da, out


class QP:
    """A sender and its selector (QP 0 uses the engine's, others a golden model)."""

    def __init__(self, name, selector, rate_cycles=1, phase=0):
        self.name, self.selector = name, selector
        self.rate, self.phase = rate_cycles, phase
        self.psn = 0
        self.retx = collections.deque()
        self.events = []                  # heap of (time, seq, event)
        self.delivered = set()
        self.sent_on = collections.Counter()

    def due(self, now):
        if self.events and self.events[0][0] <= now:
            return heapq.heappop(self.events)[2]
        return None

    def post(self, time, event, seq):
        heapq.heappush(self.events, (time, seq, event))


class Fabric:
    """The closed loop; ``run(engine, cycles)`` advances it, ``samples`` holds per-window numbers."""

    def __init__(self, seed, qps=1, rate_cycles=1, drop_ev=None, drop=0.0, failures=(), react_ecn=True,
                 collide=None, window=200):
        self.rng = random.Random(seed)
        self.drop_ev, self.drop, self.failures = drop_ev, drop, dict(failures)
        self.react_ecn, self.window = react_ecn, window
        self.now, self.seq = 0, 0
        self.failed = set()
        self.data = [collections.deque() for _ in range(PATHS)]
        self.prio = [collections.deque() for _ in range(PATHS)]
        self.arrivals = []                # heap of (time, seq, qp, psn, trimmed, marked, slot, ev)
        self.qps = [QP(f"qp{q}", None, rate_cycles, q) for q in range(qps)]
        for q in self.qps[1:]:
            q.selector = EvSelectorModel(SEL)
        self.collide = collide
        self.pending_exp = collections.deque()      # (qp, slot, ev, psn) whose DA is being expanded
        self.pending_fwd = collections.deque()      # (qp, slot, ev, psn, raw) being forwarded
        self.samples = []
        self.window_goodput = 0
        self.window_path = collections.Counter()
        self.fill_plan = self._fill_plan()
        self.stats = collections.Counter()
        self.first_bad_loss = self.demoted_at = None
        self.bad_losses = 0
        self.replacement = None

    def _fill_plan(self):
        """Backup events filling each QP's slots and FIFOs: EVs of the plane's spines in turn (with
        ``collide``: every plane-0 EV of every QP on that path), distinct tags per QP."""
        plan = []
        for q in range(len(self.qps)):
            for k in range(SEL.n_ev // PLANES + SEL.backup_depth):
                for plane in range(PLANES):
                    spine = k % SPINES
                    path = plane * SPINES + spine
                    if self.collide is not None and plane == self.collide // SPINES and k < SEL.n_ev // PLANES:
                        path = self.collide
                    plan.append((q, {"kind": "backup", "plane": plane, "ev": ev_of(path, q * 64 + k)}))
        return collections.deque(plan)

    def _event(self, qp):
        """This cycle's feedback event for ``qp``: filling first, then the due feedback."""
        if self.fill_plan and self.fill_plan[0][0] == self.qps.index(qp):
            return self.fill_plan.popleft()[1]
        return qp.due(self.now)

    def _post(self, qp, delay, event):
        self.seq += 1
        qp.post(self.now + delay, event, self.seq)

    def _send_packet(self, q, qp, sel):
        psn = qp.retx.popleft() if qp.retx else qp.psn
        if psn == qp.psn:
            qp.psn += 1
        return (q, sel["slot"], sel["ev"], psn)

    def run(self, engine, cycles):
        """``cycles`` cycles with a synchronous engine (``ModelEngine``)."""
        for _ in range(cycles):
            self.end(engine, *engine.cycle(*self.begin(engine)))

    def begin(self, engine):
        """This cycle's inputs for the engine: (want, event) of QP 0, the EV to expand, the packet to
        forward (raw, ingress port, data depths, priority depths)."""
        now = self.now
        self.qps[0].selector = engine.sel
        for path, at in self.failures.items():
            if at == now:
                self.failed.add(path)
        qp0 = self.qps[0]
        self.want0 = bool(now % qp0.rate == qp0.phase and not self.fill_plan)
        self.event0 = self._event(qp0) if not (self.fill_plan and self.fill_plan[0][0] != 0) else None
        self.exp_in = self.pending_exp[0] if self.pending_exp and self.pending_exp[0][-1] == now else None
        self.fwd_in = self.pending_fwd[0] if self.pending_fwd and self.pending_fwd[0][-1] == now else None
        packet = None
        if self.fwd_in is not None:
            packet = (self.fwd_in[4], 0, [len(d) for d in self.data], [len(p) for p in self.prio])
        return self.want0, self.event0, self.exp_in[2] if self.exp_in else None, packet

    def end(self, engine, sel, da, out):
        """The engine's answers to this cycle's inputs; the fabric advances one cycle."""
        now, qp0, event0 = self.now, self.qps[0], self.event0
        if (event0 is not None and event0["kind"] == "loss" and event0["ev"] == self.drop_ev
                and self.demoted_at is None):
            self.bad_losses += 1
            ev, state = engine.sel.slots[event0["slot"]]
            if ev != self.drop_ev or state not in (GOOD, SKIP):
                self.demoted_at = now
                self.replacement = ev if state in (GOOD, SKIP) else None
        requests = []
        if sel["valid"]:
            requests.append(self._send_packet(0, qp0, sel))
        for q, qp in enumerate(self.qps[1:], 1):
            event = self._event(qp) if not (self.fill_plan and self.fill_plan[0][0] != q) else None
            want = bool(now % qp.rate == qp.phase and not self.fill_plan)
            out_q = qp.selector.tick(want, event)
            if out_q["valid"]:
                requests.append(self._send_packet(q, qp, out_q))
        assert len(requests) <= 1, "one packet per cycle enters the expander and the forwarder"
        for q, slot, ev, psn in requests:
            self.pending_exp.append((q, slot, ev, psn, now + 1))
        if self.exp_in is not None:
            self.pending_exp.popleft()
            q, slot, ev, psn, _ = self.exp_in
            assert da["ok"], f"EV {ev:#x} refused by the expander"
            raw = _packet(ev, da["exp_ev"], q + 1, psn)
            self.pending_fwd.append((q, slot, ev, psn, raw, now + 1))
        if self.fwd_in is not None:
            self.pending_fwd.popleft()
            self._forwarded(self.fwd_in, out)
        self._links()
        self._deliver()
        self._probes()
        self.now += 1
        if self.now % self.window == 0:
            self.samples.append((self.now, self.window_goodput / self.window, dict(self.window_path),
                                 [len(d) for d in self.data]))
            self.window_goodput = 0
            self.window_path = collections.Counter()

    def _forwarded(self, item, out):
        q, slot, ev, psn, raw, _ = item
        qp = self.qps[q]
        verdict = out["verdict"]
        self.stats[verdict] += 1
        qp.sent_on[path_of(ev)] += 1
        self.window_path[(q, path_of(ev))] += 1
        record = (q, slot, ev, psn, verdict == "trimmed", out["marked"])
        if verdict == "forwarded":
            self.data[out["port"]].append(record)
        elif verdict == "trimmed":
            self.prio[out["port"]].append(record)
        else:
            assert verdict in ("data_overflow", "trim_overflow"), verdict
            self._lost(record)

    def _lost(self, record):
        q, slot, ev, psn, _, _ = record
        qp = self.qps[q]
        self.stats["lost"] += 1
        self._post(qp, RTO, {"kind": "loss", "slot": slot, "ev": ev})
        qp.retx.append(psn)
        if ev == self.drop_ev and self.first_bad_loss is None and q == 0:
            self.first_bad_loss = self.now + RTO

    def _links(self):
        if self.now % SERVICE:
            return
        for k in range(PATHS):
            queue = self.prio[k] if self.prio[k] else self.data[k]
            if not queue:
                continue
            record = queue.popleft()
            if k in self.failed or (record[2] == self.drop_ev and self.rng.random() < self.drop):
                self._lost(record)
            else:
                self.seq += 1
                heapq.heappush(self.arrivals, (self.now + LATENCY, self.seq, record))

    def _deliver(self):
        while self.arrivals and self.arrivals[0][0] <= self.now:
            q, slot, ev, psn, trimmed, marked = heapq.heappop(self.arrivals)[2]
            qp = self.qps[q]
            if trimmed:
                self.stats["nack"] += 1
                self._post(qp, ACK, {"kind": "trim", "slot": slot, "ev": ev, "last_hop": False})
                qp.retx.appendleft(psn)
                continue
            if psn not in qp.delivered:
                qp.delivered.add(psn)
                self.window_goodput += 1
            if marked:
                self.stats["ce"] += 1
                if self.react_ecn:
                    self._post(qp, ACK, {"kind": "ecn", "slot": slot, "ev": ev})

    def _probes(self):
        if self.now % PROBE_EVERY or self.fill_plan:
            return
        for qp, selector in self._selectors():
            for index, entry in enumerate(selector.pool):
                if entry is None:
                    continue
                ok = path_of(entry[0]) not in self.failed and not (
                    entry[0] == self.drop_ev and self.rng.random() < self.drop)
                self._post(qp, PROBE_LATENCY, {"kind": "probe", "index": index, "ev": entry[0], "ok": ok})

    def _selectors(self):
        yield from ((qp, qp.selector) for qp in self.qps if qp.selector is not None)


_TEMPLATES = {}


def _packet(ev, da, qp, psn):
    """The MRC data packet of ``qp`` on ``ev`` to ``da`` with ``psn`` (a cached scapy template with the
    PSN patched in: the forwarder never reads the ICRC)."""
    key = (ev, da, qp)
    if key not in _TEMPLATES:
        _TEMPLATES[key] = bytes(mrc_packet(ev=ev, da=usid_address(*_parts(da)), payload=bytes(PAYLOAD), qp=qp))
    raw = bytearray(_TEMPLATES[key])
    raw[wire.MRC_BTH_OFFSET + 9:wire.MRC_BTH_OFFSET + 12] = (psn & 0xFFFFFF).to_bytes(3, "big")
    return bytes(raw)


def _parts(da):
    """``(locator, uSIDs)`` of a 128-bit DA integer."""
    return da >> 96, [da >> (80 - 16 * i) & 0xFFFF for i in range(6)]
