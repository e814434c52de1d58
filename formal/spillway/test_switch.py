"""Formal proofs of the disaggregated Spillway's switch side (hdl/spillway/switch.py, credit.py): its
decisions (``CreditSpec``: the credit core with the links and the node as free-delay channels), the whole
switch side byte for byte (``SwitchSpec``) and its return buffer (``ReturnSpec``)."""

import pytest
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, Signal
from amaranth.lib import data

from formal.props import after_reset, counters_follow
from formal.runner import prove
from formal.spillway.channels import ShiftFifo, tracked_pair, tracked_trips
from hdl.spillway.credit import CreditCore
from hdl.spillway.switch import SpillSwitch
from models import wire
from models.headers import IP, UDP, Ether
from models.spillway.credit import CREDIT_COUNTERS, DROP, FORWARD, SPILL
from models.spillway.params import SpillSwitchParams

CREDIT_PARAMS = SpillSwitchParams(ports=2, high=2, low=1, capacity=2, drain_rate=1, drain_window=2, flows=2,
                                  depth_bits=2, handle_bits=3, counter_bits=4, mtu=100, return_slots=2)


class CreditSpec(Elaboratable):
    """CreditCore with free arrivals, queue depths and ready signals; the spill link, the node and the
    return link are one free-delay FIFO channel per origin port (requests and returns are free events
    constrained only by what was asked), re-injection a free-delay FIFO. Properties:

    - no credit underflow or overflow: ``credit[p] + (packets of p at the node or held) == capacity``,
      so the node never holds more than ``capacity`` packets of a port (never overwrites);
    - a return the switch asked for is accepted, one it did not ask for is refused; held returns fit
      ``return_slots``; the seq numbers come back in order (``misordered`` stays 0);
    - drain requests only for ports with ``qdepth <= low``, at most ``drain_rate`` per aligned window
      (counted by the spec's own window);
    - per-flow order across the round trip: of two tracked packets of one flow and port, ``late`` is
      never forwarded while ``early`` is out (spilled, not yet re-injected), and never re-injected
      before ``early``.
    """

    def __init__(self, order="flow"):
        self.core = CreditCore(CREDIT_PARAMS.replace(order=order))

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        p = core.params
        P, C, F, S = p.ports, p.capacity, p.flows, p.return_slots
        m.d.comb += [core.d.valid.eq(AnySeq(1)), core.d.payload.eq(AnySeq(core.d.payload.shape().size)),
                     core.qdepth.eq(AnySeq(core.qdepth.shape().size)), core.v.ready.eq(AnySeq(1)),
                     core.req.ready.eq(AnySeq(1)), core.ret_valid.eq(AnySeq(1)), core.ret_port.eq(AnySeq(8)),
                     core.ret_bad.eq(AnySeq(1)), core.hold.eq(AnySeq(P))]
        v, a = core.v.payload, core.d.payload
        decided = core.d.valid & core.v.ready
        spill = decided & (v.kind == 1)

        # Tracked packets: early and late of one flow and port, early decided first.
        early_h, late_h, flow, port, seen = tracked_pair(m, core)

        # The world: per origin port a FIFO (spill link + node + return link), the requests in flight,
        # and the returns held by the switch until re-injected.
        record = data.StructLayout({"port": range(P), "flow": range(F), "seq": 16, "tag": 2})
        tag = Cat(a.handle == early_h, a.handle == late_h)
        node = [ShiftFifo(m, record, C + 1, f"node{q}") for q in range(P)]
        held = ShiftFifo(m, record, S + 1, "held")
        inflight = [Signal(range(C + 1), name=f"inflight{q}") for q in range(P)]
        ret_port = core.ret_port[:1]
        ret_fits = core.ret_valid & ~core.ret_bad & (core.ret_port < P)
        m.d.comb += Assert(core.ret_ok == (ret_fits & (Array(inflight)[ret_port] != 0)),
                           "a return is accepted iff it was asked for")
        for q in range(P):
            asked = core.ret_ok & (ret_port == q)
            new = Signal(record, name=f"new{q}")
            m.d.comb += [new.port.eq(q), new.flow.eq(v.flow), new.seq.eq(v.seq), new.tag.eq(tag)]
            node[q].update(spill & (v.port == q), new, asked)
            requested = core.req.valid & core.req.ready & (core.req.payload.port == q)
            m.d.sync += inflight[q].eq(inflight[q] + requested - asked)
            in_held = sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
            m.d.comb += [
                Assert(node[q].len <= C, f"the node never holds more than capacity packets of port {q}"),
                Assert(core.credit[q] + node[q].len + in_held == C, f"credits of port {q}: no underflow or overflow"),
                Assert(inflight[q] <= node[q].len, f"port {q}: only stored packets are requested"),
                Assert(core.asked[q] == inflight[q], f"port {q}: requests in flight"),
            ]
        picked = Signal(record)
        m.d.comb += picked.eq(Array(node[q].head() for q in range(P))[ret_port])
        done = AnySeq(1) & (held.len != 0)
        head = held.head()
        m.d.comb += [core.done_valid.eq(done), core.done_port.eq(head.port), core.done_flow.eq(head.flow),
                     core.done_seq.eq(head.seq)]
        held.update(core.ret_ok, picked, done)
        m.d.comb += [Assert(held.len + sum(inflight) == core.reserved, "returns requested or held are reserved"),
                     Assert(core.reserved <= S, "reserved within return_slots"),
                     Assert(core.misordered == 0, "returns come back in seq order")]

        # Drain requests: queue depth and the spec's own rate window.
        window, used = Signal(range(p.drain_window)), Signal(range(p.drain_rate + 2))
        requested = core.req.valid & core.req.ready
        with m.If(window == p.drain_window - 1):
            m.d.sync += [window.eq(0), used.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(window + 1), used.eq(used + requested)]
        m.d.comb += [
            Assert(~core.req.valid | (Array(core.qdepth)[core.req.payload.port[:1]] <= p.low),
                   "drain request only when the queue depth is <= low"),
            Assert(~core.req.valid | ~core.hold.bit_select(core.req.payload.port[:1], 1),
                   "no drain request for a held port"),
            Assert(~requested | (used < p.drain_rate), "at most drain_rate requests per window"),
            Assert(window == core.window, "windows aligned"), Assert(used == core.used, "requests in this window"),
        ]

        # Inductive strengthening: the core's tables against the world's contents.
        live = [(node[q], k, node[q].items[k], node[q].len > k) for q in range(P) for k in range(C + 1)]
        live += [(held, k, held.items[k], held.len > k) for k in range(S + 1)]
        for f in range(F):
            m.d.comb += Assert(core.flow_count[f] == sum(ok & (r.flow == f) for _, _, r, ok in live),
                               f"flow table entry {f} counts the packets out")
        for q in range(P):
            in_held = [sum((held.len > j) & (held.items[j].port == q) for j in range(k)) for k in range(S + 1)]
            total = sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
            for k in range(S + 1):
                with m.If((held.len > k) & (held.items[k].port == q)):
                    m.d.comb += Assert(held.items[k].seq == (core.expect[q] + in_held[k])[:16], "held seqs in order")
            for k in range(C + 1):
                with m.If(node[q].len > k):
                    m.d.comb += Assert((node[q].items[k].seq == (core.expect[q] + total + k)[:16])
                                       & (node[q].items[k].port == q), f"node {q} seqs in order")
            m.d.comb += [Assert(core.seqs[q] == (core.expect[q] + total + node[q].len)[:16], f"seq {q} numbering"),
                         Assert(core.unasked[q] + core.asked[q] == node[q].len, f"port {q}: asked + unasked")]

        # Per-flow order across the round trip.
        out = tracked_trips(m, a.handle, spill, done, head.tag, early_h, late_h)
        early_out = out["early"][0] & ~out["early"][1]
        late_forwarded = decided & (a.handle == late_h) & (v.kind == 0)
        where = {}
        for name, bit in (("early", 0), ("late", 1)):
            hits = [(fifo, k, ok & r.tag[bit]) for fifo, k, r, ok in live]
            for _, _, r, ok in live:
                m.d.comb += Assert(~(ok & r.tag[bit]) | ((r.flow == flow) & (r.port == port)),
                                   f"{name} is out with its flow and port")
            m.d.comb += Assert(sum(hit for _, _, hit in hits) == (out[name][0] & ~out[name][1]),
                               f"{name} is in one place while out")
            where[name] = hits
        for (fe, ke, he) in where["early"]:
            for (fl, kl, hl) in where["late"]:
                if fe is fl and ke >= kl:
                    m.d.comb += Assert(~(he & hl), "early is ahead of late")
                if fl is held and fe is not held:
                    m.d.comb += Assert(~(he & hl), "late is not re-injected-side while early is at the node")
        m.d.comb += [
            Assert(~out["late"][0] | seen["early"], "late after early"),
            Assert(~out["early"][0] | seen["early"], "early spilled after seen"),
            Assert(~out["early"][1] | out["early"][0], "early back after spilled"),
            Assert(~out["late"][1] | out["late"][0], "late back after spilled"),
            Assert(~out["late"][0] | seen["late"], "late spilled after seen"),
            Assert(~(late_forwarded & early_out), "late is never forwarded while early is out"),
            Assert(~(out["late"][2] & early_out), "late is never re-injected before early"),
        ]
        # The verdict and every counter, from the spec's own judgement of the arrival: bad (malformed or
        # port >= ports); must spill (queue depth >= high, or packets of the flow (port: of the port) out,
        # from the shadow's records); oversize (length > mtu); overflow (the shadow's credit, capacity minus
        # the port's packets out, is 0).
        outq = Array(node[q].len + sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
                     for q in range(P))
        flow_out = Array(sum(ok & (r.flow == f) for _, _, r, ok in live) for f in range(F))
        bad = a.malformed | (a.port >= P)
        ordered = (flow_out[a.flow] != 0) if p.order == "flow" else (outq[a.port[:1]] != 0)
        must_spill = ~bad & ((Array(core.qdepth)[a.port[:1]] >= p.high) | ordered)
        oversize = must_spill & (a.length > p.mtu)
        overflow = must_spill & ~oversize & (outq[a.port[:1]] == C)
        kind = Mux(bad | oversize | overflow, 2, Mux(must_spill, 1, 0))
        m.d.comb += Assert(~decided | (v.kind == kind), "the verdict is the spec's: forward, spill or drop")
        counters_follow(m, {name: getattr(core, name) for name in CREDIT_COUNTERS}, {
            "forwarded": decided & ~bad & ~must_spill, "spilled": decided & must_spill & ~oversize & ~overflow,
            "reinjected": done, "spill_overflow": decided & overflow, "spill_oversize": decided & oversize,
            "malformed": decided & bad, "drain_requests": requested,
            "return_malformed": core.ret_valid & ~(ret_fits & (Array(inflight)[ret_port] != 0)),
            "misordered": Const(0)}, saturating=False, block="credit core ")
        # Reset (free at every cycle): the cycle after it every credit is capacity, nothing asked or held.
        m.d.comb += Assert(~after_reset(m) | ((Cat(*core.credit) == Cat(*(Const(C, range(C + 1)) for _ in range(P))))
                                              & (Cat(*core.unasked, *core.asked) == 0) & (core.reserved == 0)
                                              & (core.window == 0) & (core.used == 0) & (core.rr == 0)
                                              & ~core.req.valid),
                           "a reset gives every credit back, nothing asked, no return slot, window at 0")
        m.d.comb += [Cover(out["early"][1] & out["late"][1]), Cover(core.spill_overflow != 0)]
        return m


@pytest.mark.parametrize("order", ["flow", "port"])
def test_credit_core_prove(order):
    prove(CreditSpec(order), f"spill_credit_{order}", depth=4, mode="prove")


# --- Disaggregated mode, byte level: the whole switch side (SpillSwitch) --------

SWITCH_PARAMS = SpillSwitchParams(ports=2, high=2, low=1, capacity=2, drain_rate=1, drain_window=2, flows=2,
                                  depth_bits=2, handle_bits=3, counter_bits=4, data_bytes=42, mtu=42, buffer=3,
                                  return_slots=1)


class SwitchSpec(Elaboratable):
    """``SpillSwitch`` with every input free (packets and bytes on ``i`` and on the
    return link ``spill_i``, queue depths, ``o.ready``, ``spill_o.ready``). The spec watches only the
    ports: it parses each frame's spill header on ``spill_o`` at the frame's first beat (its own frame
    boundaries) and counts, per origin port, DATA frames started and sent whole, DRAIN frames, and
    packets re-injected on ``o`` (``spilled=1``, last beat). Properties (k-induction, unbounded):

    - every frame on ``spill_o`` carries EtherType 0x88B5 and op DATA or DRAIN; a DRAIN frame is one
      beat with ``count = 1``; DATA seqs of a port are 0, 1, 2, ... (the spec's count, modulo 2**16);
    - a DRAIN frame for port p only after a DATA frame of p left whole for each request (the DATA frames of
      p sent whole less its DRAIN frames never goes below 0: a DRAIN never overtakes the packet it asks
      for on the FIFO link);
    - drain only when ``qdepth[p] <= low``, at most ``drain_rate`` per aligned window (spec's window);
    - only asked-for packets are re-injected (DRAIN frames of p less packets of p re-injected never below
      0) and credits: ``credits[p]`` + DATA frames of p started - re-injected <= ``capacity`` (never more
      packets at the node than it holds);
    - no packet both forwarded and spilled: the packets accepted on ``i`` less those forwarded on ``o``, those
      whose DATA frame started and those the verdict counters count dropped never go below 0 (modulo the
      counter width: at most the ingress FIFO's);
    - ``o`` marks ``first`` exactly on a packet's first beat (the spec's framing of ``o``);
    - ``reinjected``, ``drain_requests`` and ``return_malformed`` on their events, every packet accepted
      counted by one verdict counter; a reset idles both outputs, returns every credit, clears the counters.

    Strengthening invariants (``_strengthen``): the return path's and the credits' (``return_path``,
    ``credit_invariants``); both ingress FIFOs' pointers, every verdict's beats in the beat FIFO (the head's
    less those popped, then the arriving packet's), ``last`` only on a packet's final beat (and there but
    for a giant); a spilled verdict names a port, its seq the next of its port; the encapsulator within a
    frame exactly when the head is a spill being sent, the spec's spill_o framing as the encapsulator's;
    ``o``'s owner as the head and the decapsulator; per port ``unsent`` = spilled verdicts queued, and the
    spec's differences against the credit core (unasked, asked, held, credit, seqs); windows aligned."""

    def __init__(self, params=SWITCH_PARAMS):
        self.dut = SpillSwitch(params)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        p = dut.params
        P, C = p.ports, p.capacity
        # Free beats, but their bytes are one of a few frames (the proof's cost is in the bus width): on
        # i two UDP packets of different flows or a non-IP frame, on spill_i a frame with a free spill
        # header (EtherType, op, port, flow, seq) and zeros after it.
        for port in (dut.i, dut.spill_i):
            m.d.comb += [port.valid.eq(AnySeq(1)), port.payload.eq(AnySeq(port.payload.shape().size))]
        frames = [int.from_bytes(bytes(Ether() / IP(src="10.0.0.1") / UDP(sport=sport))[:p.data_bytes].ljust(
            p.data_bytes, b"\0"), "little") for sport in (1, 2)]
        frames.append(frames[0] ^ 0xFF << 8 * wire.ETHERTYPE_AT)
        pick = AnySeq(2)
        m.d.comb += Assume(pick < 3)
        m.d.comb += dut.i.payload.data.eq(Array(Const(f, 8 * p.data_bytes) for f in frames)[pick])
        header = AnySeq(8 * (wire.SPILL_SEQ_AT + 2 - wire.ETHERTYPE_AT))
        m.d.comb += dut.spill_i.payload.data.eq(Cat(Const(0, 8 * wire.ETHERTYPE_AT), header))
        # keep: a full beat or its first 1, 21 or 22 bytes; ports 0, 1 or a bad one (2).
        keeps = Array(Const((1 << k) - 1, p.data_bytes) for k in (p.data_bytes, 1, 21, 22))
        for port in (dut.i, dut.spill_i):
            m.d.comb += port.payload.keep.eq(keeps[AnySeq(2)])
        m.d.comb += Assume(dut.i.payload.meta.port < 3)
        m.d.comb += [dut.qdepth.eq(AnySeq(dut.qdepth.shape().size)), dut.o.ready.eq(AnySeq(1)),
                     dut.spill_o.ready.eq(AnySeq(1))]

        def byte(value, at):
            return value.data[8 * at:8 * at + 8]

        n = p.counter_bits
        so, o = dut.spill_o, dut.o
        so_take, o_take = so.valid & so.ready, o.valid & o.ready
        inside, op, oport = Signal(), Signal(8), Signal(8)
        first = so_take & ~inside
        cur_op = Mux(first, byte(so.payload, wire.SPILL_OP_AT), op)
        cur_port = Mux(first, byte(so.payload, wire.SPILL_PORT_AT), oport)
        with m.If(so_take):
            m.d.sync += [inside.eq(~so.payload.last), op.eq(cur_op), oport.eq(cur_port)]
        o_inside = Signal()                             # the spec's framing of o
        with m.If(o_take):
            m.d.sync += o_inside.eq(~o.payload.last)
        with m.If(o.valid):
            m.d.comb += Assert(o.payload.first == ~o_inside, "o: first exactly on a packet's first beat")
        ethertype = Cat(byte(so.payload, wire.ETHERTYPE_AT + 1), byte(so.payload, wire.ETHERTYPE_AT))
        seq = Cat(byte(so.payload, wire.SPILL_SEQ_AT + 1), byte(so.payload, wire.SPILL_SEQ_AT))
        m.d.comb += [
            Assert(~first | (ethertype == wire.ETHERTYPE_SPILL), "spill_o frames carry EtherType 0x88B5"),
            Assert(~first | (cur_op == wire.SPILL_DATA) | (cur_op == wire.SPILL_DRAIN), "spill_o: op DATA or DRAIN"),
            Assert(~first | (cur_port < P), "spill_o: origin port < ports"),
            Assert(~(first & (cur_op == wire.SPILL_DRAIN)) | so.payload.last
                   & (byte(so.payload, wire.SPILL_COUNT_AT) == 1), "a DRAIN frame is one beat asking for 1"),
        ]
        window, used = Signal(range(p.drain_window)), Signal(range(p.drain_window + 2))
        drain = first & (cur_op == wire.SPILL_DRAIN)
        last_window = window == p.drain_window - 1
        m.d.sync += [window.eq(Mux(last_window, 0, window + 1)), used.eq(Mux(last_window, 0, used + drain))]
        m.d.comb += [Assert(used + drain <= p.drain_rate, "at most drain_rate DRAIN frames per window"),
                     Assert(~drain | (Array(dut.qdepth)[cur_port[:1]] <= p.low), "drain only at qdepth <= low")]
        reinjected = o_take & o.payload.last & o.payload.meta.spilled
        started, sent_dd, asked_db, out_sb = [], [], [], []
        for q in range(P):
            mine = cur_port == q
            start_q = first & mine & (cur_op == wire.SPILL_DATA)
            sent_q = so_take & so.payload.last & mine & (cur_op == wire.SPILL_DATA)
            drain_q, back_q = drain & mine, reinjected & (o.payload.meta.port == q)
            data_started = Signal(16, name=f"data_started{q}")          # DATA frames started (mod 2**16)
            dd = Signal(range(C + 2), name=f"sent_less_drains{q}")       # DATA frames sent whole - DRAINs
            db = Signal(range(C + 2), name=f"drains_less_back{q}")       # DRAINs - packets re-injected
            sb = Signal(range(C + 2), name=f"started_less_back{q}")      # DATA frames started - re-injected
            m.d.sync += [data_started.eq(data_started + start_q), dd.eq(dd + sent_q - drain_q),
                         db.eq(db + drain_q - back_q), sb.eq(sb + start_q - back_q)]
            m.d.comb += [
                Assert(~start_q | (seq == data_started), f"port {q}: DATA seqs 0, 1, 2, ..."),
                Assert(dd + sent_q >= drain_q, f"port {q}: a DRAIN never overtakes its DATA frame"),
                Assert(db + drain_q >= back_q, f"port {q}: only asked-for packets are re-injected"),
                Assert(dut.credits[q] + sb <= C, f"port {q}: credits never exceed the node's room"),
            ]
            started.append(start_q)
            sent_dd.append(dd)
            asked_db.append(db)
            out_sb.append((sb, data_started))
        # accepted on i less forwarded on o, less DATA frames started, less dropped (the verdict counters)
        accepted_i = dut.i.valid & dut.i.ready & dut.i.payload.last
        forwarded_o = o_take & o.payload.last & ~o.payload.meta.spilled
        passed, pending = Signal(n), Signal(n)
        m.d.sync += passed.eq(passed + accepted_i - forwarded_o - sum(started))
        m.d.comb += pending.eq(passed - dut.spill_overflow - dut.spill_oversize - dut.malformed)
        m.d.comb += Assert(pending <= p.buffer, "no packet both forwarded and spilled (nor twice either)")

        # Counters seen from the ports: re-injected, drain requests (a DRAIN frame leaving spill_o: the spec's
        # parse), return_malformed (a frame's first beat on spill_i not a RETURN of a port with a drain
        # outstanding: return_path's judgement against the spec's own count of DRAINs less returns accepted);
        # every packet accepted on i is counted once by one verdict counter.
        cells = [[dut.ret_mem.read_port(domain="comb") for _ in range(dut.slot_beats)] for _ in range(dut.slots)]
        env = return_path(m, dut, cells)
        asked = [Signal(range(C + 2), name=f"spec_asked{q}") for q in range(P)]
        r_port = byte(dut.spill_i.payload, wire.SPILL_PORT_AT)
        accept = env["first"] & env["good"] & (r_port < P) & (Array(asked)[r_port[:1]] != 0)
        for q in range(P):
            m.d.sync += asked[q].eq(asked[q] + (drain & (cur_port == q)) - (accept & (r_port == q)))
        counters_follow(m, {name: getattr(dut, name) for name in CREDIT_COUNTERS}, {
            "reinjected": reinjected, "drain_requests": drain,
            "return_malformed": env["first"] & ~accept}, saturating=False, block="switch ")
        accepted = Signal(n)
        m.d.sync += accepted.eq(accepted + accepted_i)
        verdicts = sum(getattr(dut, name) for name in ("forwarded", "spilled", "spill_overflow", "spill_oversize",
                                                        "malformed"))
        m.d.comb += Assert(verdicts[:n] == accepted, "every packet accepted on i is counted by exactly one verdict "
                                                     "counter")
        # Reset (free at every cycle): the cycle after it both outputs are idle, every credit is back.
        idle = ~o.valid & ~so.valid & (dut.outstanding == 0)
        for q in range(P):
            idle &= dut.credits[q] == C
        for name in CREDIT_COUNTERS:
            idle &= getattr(dut, name) == 0
        m.d.comb += Assert(~after_reset(m) | idle, "switch: a reset idles o and spill_o, returns every credit and "
                                                  "clears the counters")
        self._strengthen(m, dut, env, locals())
        return m

    def _strengthen(self, m, dut, env, spec):
        """The invariants of the class docstring (``spec``: ``elaborate``'s locals)."""
        p = dut.params
        P, C, D = p.ports, p.capacity, p.buffer
        core, enc = dut.core, dut.enc
        held = credit_invariants(m, dut, env)
        for fifo, name in ((dut.beat_fifo, "beat"), (dut.verdict_fifo, "verdict")):
            after = fifo.consume + fifo.level
            m.d.comb += Assert((fifo.level <= D) & (fifo.consume < D)
                               & (fifo.produce == Mux(after >= D, after - D, after)),
                               f"{name} FIFO: produce = consume + level")

        def entries(fifo, layout):
            found = []
            for k in range(D):
                read = fifo.storage.read_port(domain="comb")
                m.d.comb += read.addr.eq(Mux(fifo.consume + k >= D, fifo.consume + k - D, fifo.consume + k))
                found.append((k < fifo.level, data.View(layout, read.data)))
            return found
        verdicts, beats = entries(dut.verdict_fifo, dut.entry), entries(dut.beat_fifo, dut.cell)
        head = verdicts[0][1]
        vlevel, hindex = dut.verdict_fifo.level, dut.hindex
        # every verdict's beats in the beat FIFO: the head's less those popped, then the arriving packet's
        start, total = Const(0, 8), Const(0, 8)
        spans = []
        for k, (live, e) in enumerate(verdicts):
            rest = e.beats - (hindex if k == 0 else 0)
            m.d.comb += Assert(~live | ((e.beats >= 1) & (e.beats <= D) & (e.verdict.kind <= 2)
                                        & ((e.verdict.kind != SPILL) | (e.verdict.port < P))),
                               f"verdict {k}: 1..buffer beats, a kind; a spill names a port")
            spans.append((live, e, start, rest))
            start = start + Mux(live, rest, 0)
        total = start
        m.d.comb += [Assert((vlevel == 0) | (hindex < head.beats), "the head's beats popped: fewer than its beats"),
                     Assert((vlevel != 0) | (hindex == 0), "no head: none popped"),
                     Assert(dut.beat_fifo.level == total + dut.wcount, "beat FIFO: the verdicts' beats and the "
                                                                       "arriving packet's"),
                     Assert(dut.wcount <= D, "the arriving packet's beats written: within the buffer")]
        for j, (live_b, b) in enumerate(beats):
            for live, e, at, rest in spans:
                here = live_b & live & (j >= at) & (j < at + rest)
                final = j == at + rest - 1
                m.d.comb += Assert(~(here & ~final) | ~b.last, f"beat {j}: last only on its packet's final beat")
                m.d.comb += Assert(~(here & final & (e.verdict.kind != DROP)) | b.last,
                                   f"beat {j}: a forwarded or spilled packet's final beat is last")
            m.d.comb += Assert(~(live_b & (j >= total)) | ~b.last, f"beat {j}: the arriving packet has no last yet")
        # the encapsulator, the spill_o framing and o's owner against the head
        spilling = (vlevel != 0) & (head.verdict.kind == SPILL) & (hindex != 0)
        forwarding = (vlevel != 0) & (head.verdict.kind == FORWARD) & (hindex != 0)
        m.d.comb += [
            Assert(enc.inside == spilling, "the encapsulator is within a frame exactly while the head spill is sent"),
            Assert(~(enc.inside & enc.extra), "the encapsulator: its extra beat after the frame's input"),
            Assert(spec["inside"] == (enc.inside | enc.extra), "spill_o framing: within a DATA frame as the "
                                                               "encapsulator"),
            Assert(~spec["inside"] | ((spec["op"] == wire.SPILL_DATA) & (spec["oport"] < P)),
                   "spill_o framing: a frame in progress is DATA of a port"),
            Assert(~enc.inside | (spec["oport"] == head.verdict.port), "spill_o framing: the head's port"),
            Assert((dut.owner == 2) == forwarding, "o: a forwarded packet in progress is the head's"),
            Assert(spec["o_inside"] == (dut.owner != 0), "o framing: within a packet as the owner"),
        ]
        # per port: spilled verdicts queued, their seqs, and the spec's differences
        for q in range(P):
            spills = [(live & (e.verdict.kind == SPILL) & (e.verdict.port == q), e) for live, e in verdicts]
            queued = sum(hit for hit, _ in spills)
            started = spilling & (head.verdict.port == q)        # the head's DATA frame has started
            extra = enc.extra & (spec["oport"] == q)
            sb, data_started = spec["out_sb"][q]
            base = (data_started - started)[:16]
            before = Const(0, 4)
            for hit, e in spills:
                m.d.comb += Assert(~hit | (e.verdict.seq == (base + before)[:16]), f"port {q}: queued spill seqs")
                before = before + hit
            m.d.comb += [
                Assert(dut.unsent[q] == queued, f"port {q}: unsent = spilled verdicts queued"),
                Assert(core.seqs[q] == (base + queued)[:16], f"port {q}: the next seq"),
                Assert(spec["sent_dd"][q] == core.unasked[q] - queued - extra,
                       f"port {q}: DATA sent - DRAINs = unasked less queued and the extra beat"),
                Assert(spec["asked_db"][q] == core.asked[q] + held[q],
                       f"port {q}: DRAINs - re-injected = asked + held"),
                Assert(sb == C - core.credit[q] - queued + started, f"port {q}: started - re-injected"),
                Assert(spec["asked"][q] == core.asked[q], f"port {q}: asked as the spec's"),
            ]
        m.d.comb += [Assert((spec["window"] == core.window) & (spec["used"] == core.used), "windows aligned")]
        live_fwd_spill = sum(live & (e.verdict.kind != DROP) for live, e in verdicts)
        m.d.comb += Assert(spec["pending"] == (live_fwd_spill - spilling)[:p.counter_bits],
                           "pending: forwarded or spilled verdicts queued, not yet forwarded whole or started")


def test_disaggregated_switch_prove():
    """The whole switch side at its ports: spill link frames, DRAIN behind DATA, credits, counters (k-induction)."""
    prove(SwitchSpec(), "spill_switch", depth=2)


# --- Disaggregated mode, the return buffer byte for byte (SpillSwitch) ------------------------------------

#: Two return slots (the slots cycle), of two 42-byte beats each; one port's worth of the switch side.
RETURN_PARAMS = SWITCH_PARAMS.replace(return_slots=2)


def return_path(m, dut, slot_cells):
    """The return path's properties and invariants (``ReturnSpec``'s; k-inductive with the tracked frame's or
    on their own): the spec frames ``spill_i`` itself and judges each frame's first beat, counts the frames
    held (accepted, not yet re-injected), the slots written and read and the frames stored, and relates the
    receive and read pointers, the frames committed and the decapsulator's state to them (``slot_cells``:
    read ports of every cell of ``ret_mem``, per slot). Returns the spec's signals by name."""
    p = dut.params
    P, S, B, H = p.ports, dut.slots, dut.slot_beats, wire.SPILL_HEADER_BYTES
    core, dec = dut.core, dut.dec
    # --- the spec's framing and judgement of spill_i ---
    ri = dut.spill_i
    beat = ri.payload
    inside, index = Signal(), Signal(range(B + 1))      # beats of the frame so far (saturating at B)
    first = ri.valid & ~inside
    octet = lambda at: beat.data.word_select(at, 8)      # noqa: E731
    good = ((Cat(octet(wire.ETHERTYPE_AT + 1), octet(wire.ETHERTYPE_AT)) == wire.ETHERTYPE_SPILL)
            & (octet(wire.SPILL_OP_AT) == wire.SPILL_RETURN) & ~(beat.last & ~beat.keep[H]))
    with m.If(ri.valid):
        m.d.sync += [inside.eq(~beat.last), index.eq(Mux(beat.last, 0, Mux(index == B, B, index + 1)))]
    m.d.comb += [Assert(dut.rx_inside == inside, "return link: inside a frame as the spec frames it"),
                 Assert(dut.wr_index == index, "return link: the frame's beat count as the spec's"),
                 Assert((inside == (index != 0)) & (index <= B),
                        "spec framing: beats counted exactly within a frame")]
    with m.If(first):
        m.d.comb += Assert((core.ret_bad == ~good) & (core.ret_port == octet(wire.SPILL_PORT_AT)),
                           "return link: a frame's first beat judged as the SPEC says (a RETURN with a packet)")
    accepted = Signal()                 # the frame arriving was accepted at its first beat
    take = first & core.ret_ok
    with m.If(first):
        m.d.sync += accepted.eq(core.ret_ok)
    ok = Mux(first, core.ret_ok, accepted)
    m.d.comb += Assert(~inside | (dut.wr_ok == accepted),
                       "return link: the frame arriving accepted as the spec saw")
    commit = ri.valid & ok & beat.last

    # --- frames held: accepted and not yet re-injected; slots written and read ---
    o = dut.o
    reinjected = o.valid & o.ready & o.payload.last & o.payload.meta.spilled
    held = Signal(range(S + 2))
    m.d.sync += held.eq(held + take - reinjected)
    wr, rd, stored = Signal(range(S)), Signal(range(S)), Signal(range(S + 1))
    feed = dec.i.valid & dec.i.ready
    read_last = feed & dec.i.payload.last
    with m.If(commit):
        m.d.sync += wr.eq(Mux(wr == S - 1, 0, wr + 1))
    with m.If(read_last):
        m.d.sync += rd.eq(Mux(rd == S - 1, 0, rd + 1))
    m.d.sync += stored.eq(stored + commit - read_last)
    arriving = inside & accepted
    m.d.comb += [
        Assert(core.reserved == sum(core.asked) + held, "return slots reserved: requests outstanding + held"),
        Assert(core.reserved <= S, "return slots reserved within return_slots"),
        Assert(held == arriving + stored + dec.flush, "held: arriving, stored, or the decapsulator's last beat"),
        Assert((dut.wr_slot == wr) & (dut.rd_slot == rd) & (dut.committed == stored),
               "return buffer: write and read slots and frames stored as the spec's"),
        Assert(wr == Mux(rd + stored >= S, rd + stored - S, rd + stored), "return buffer: write = read + stored"),
        Assert((wr < S) & (rd < S) & (dut.rd_index < B), "return buffer: pointers in range"),
        Assert(dec.have == (dut.rd_index != 0), "decapsulator: holds a beat exactly within a frame"),
        Assert((dut.rd_index == 0) | (stored != 0), "return buffer: a frame read from is stored"),
        Assert(~dec.flush | ~dec.have, "decapsulator: the extra beat after the frame's input"),
        Assert(((dut.owner == 1) == dec.emitted) & (dut.owner != 3), "o: a returned packet in progress is the "
                                                                      "decapsulator's frame begun"),
        Assert(~dec.emitted | dec.have | dec.flush, "decapsulator: a frame begun is held or ending"),
    ]

    # every stored frame ends within its slot; the one being read has not ended before its read index
    for k, cells in enumerate(slot_cells):
        m.d.comb += [cell.addr.eq(k * B + b) for b, cell in enumerate(cells)]
        live = Mux(k >= rd, k - rd, k + S - rd) < stored
        m.d.comb += [Assert(~live | Cat(*(cell.data.last for cell in cells)).any(),
                            f"return slot {k}: a stored frame ends within its slot"),
                     Assert(~live | ~cells[0].data.last | cells[0].data.keep[H],
                            f"return slot {k}: a stored one-beat frame carries a packet")]
        with m.If(live & (rd == k)):
            m.d.comb += [Assert(~((b < dut.rd_index) & cell.data.last), f"return slot {k}: read past its end")
                         for b, cell in enumerate(cells)]
        with m.If(arriving & (wr == k)):
            m.d.comb += [Assert(~(b < index) | (cell.data.last == (b == B - 1)),
                                f"return slot {k}: an arriving frame's beats, last only on the slot's last")
                         for b, cell in enumerate(cells)]

    return locals()


def credit_invariants(m, dut, env):
    """Every node slot of a port is a credit, a packet spilled and not yet asked for, one asked for, or one
    returned and held (``env``: ``return_path``'s): ``credit[q] + unasked[q] + asked[q] + held(q) ==
    capacity``, where a held frame's port is its header's (the arriving or stored frame's first beat in the
    return buffer, or ``ret_port`` for the decapsulator's last beat). So a credit never exceeds ``capacity``.
    Returns held(q) for every port."""
    p = dut.params
    P, C, S = p.ports, p.capacity, dut.slots
    core, dec = dut.core, dut.dec
    rd, wr, stored, arriving, slot_cells = (env[k] for k in ("rd", "wr", "stored", "arriving", "slot_cells"))
    held_slots = []
    for k, cells in enumerate(slot_cells):
        port = cells[0].data.data.word_select(wire.SPILL_PORT_AT, 8)
        live = (Mux(k >= rd, k - rd, k + S - rd) < stored) | (arriving & (wr == k))
        m.d.comb += Assert(~live | (port < P), f"return slot {k}: a held frame's port is a port")
        held_slots.append((live, port))
        with m.If((dut.rd_index != 0) & (rd == k)):
            m.d.comb += Assert(dut.ret_port == port, f"return slot {k}: the frame read names its port")
    with m.If(dec.flush):
        m.d.comb += Assert(dut.ret_port < P, "the decapsulator's last beat: its frame's port is a port")
    held = []
    for q in range(P):
        held.append(sum(live & (port == q) for live, port in held_slots) + (dec.flush & (dut.ret_port == q)))
        m.d.comb += Assert(core.credit[q] + core.unasked[q] + core.asked[q] + held[q] == C,
                           f"port {q}: credits + spilled (unasked, asked, held) == capacity")
    return held


class ReturnSpec(Elaboratable):
    """The switch side's return path, unbounded: every input free (packets on ``i`` of the few frames
    ``SwitchSpec`` uses, free beats on ``spill_i``, queue depths, ``o.ready``, ``spill_o.ready``). The spec
    frames ``spill_i`` itself (a frame starts after a last beat; ``spill_i.ready`` is 1) and judges each
    frame's first beat (SPEC: a RETURN is EtherType 0x88B5, op RETURN, and carries a packet: more than its
    22-byte header); it counts the frames accepted (the credit core's ``ret_ok``, proved against the
    requests in ``CreditSpec``), their beats and the re-injected packets leaving ``o``. Properties:

    - the first beat's judgement and origin port reach the credit core as the spec's (``ret_bad``,
      ``ret_port``);
    - the return buffer never holds more than ``return_slots`` frames (accepted, not yet re-injected:
      ``reserved`` = requests outstanding + those; ``reserved <= return_slots``);
    - byte for byte: one tracked accepted frame (chosen freely) and its tracked beat ``tj`` are read back
      into the decapsulator in acceptance order (the spec's own write and read slots), beat ``tj`` with its
      byte ``lane`` (any: ``AnyConst``, so every lane is checked) and keep as they came, ``last`` on the
      frame's last beat (the slot's last beat for a longer frame), ``first`` on beat 0.

    Strengthening: the receive and read pointers, the frames committed and the decapsulator's state
    against the spec's counts, and the memory cells of the tracked frame (read through extra ports)."""

    def __init__(self, params=RETURN_PARAMS):
        self.dut = SpillSwitch(params)
        self.cells = [self.dut.ret_mem.read_port(domain="comb") for _ in range(self.dut.slot_beats)]
        self.slot_cells = [[self.dut.ret_mem.read_port(domain="comb") for _ in range(self.dut.slot_beats)]
                           for _ in range(self.dut.slots)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        p = dut.params
        P, S, B, W = p.ports, dut.slots, dut.slot_beats, p.data_bytes
        dec = dut.dec
        for port in (dut.i, dut.spill_i):
            m.d.comb += [port.valid.eq(AnySeq(1)), port.payload.eq(AnySeq(port.payload.shape().size))]
        frames = [int.from_bytes(bytes(Ether() / IP(src="10.0.0.1") / UDP(sport=sport))[:W].ljust(W, b"\0"), "little")
                  for sport in (1, 2)]
        pick = AnySeq(1)
        m.d.comb += dut.i.payload.data.eq(Array(Const(f, 8 * W) for f in frames)[pick])
        m.d.comb += [Assume(dut.i.payload.meta.port < P), dut.qdepth.eq(AnySeq(dut.qdepth.shape().size)),
                     dut.o.ready.eq(AnySeq(1)), dut.spill_o.ready.eq(AnySeq(1))]

        env = return_path(m, dut, self.slot_cells)
        ri, beat, index, take, feed, rd, wr, stored, arriving = (env[k] for k in (
            "ri", "beat", "index", "take", "feed", "rd", "wr", "stored", "arriving"))

        # --- the tracked frame: its beat tj, byte lane `lane` (and every keep bit) ---
        tj, lane = Signal(range(B)), Signal(range(W))
        m.d.comb += [tj.eq(AnyConst(range(B))), Assume(tj < B), lane.eq(AnyConst(range(W))), Assume(lane < W)]

        def byte(value):
            return value.word_select(lane, 8)
        state = Signal(2)                   # 0 none, 1 arriving, 2 stored (read from beat `pos` on)
        slot, length = Signal(range(S)), Signal(range(B + 1))
        t_data, t_keep, t_last = Signal(8), Signal(W), Signal()
        starts = take & AnySeq(1) & (state == 0)
        with m.If((starts | (state == 1)) & ri.valid):
            with m.If(index == tj):
                m.d.sync += [t_data.eq(byte(beat.data)), t_keep.eq(beat.keep), t_last.eq(beat.last | (index == B - 1))]
            m.d.sync += state.eq(1)
            with m.If(starts):
                m.d.sync += slot.eq(wr)
            with m.If(beat.last):
                m.d.sync += [state.eq(2), length.eq(Mux(index >= B, B, index + 1))]
        ours = (state == 2) & (rd == slot) & dec.i.valid
        with m.If(ours):
            m.d.comb += [Assert(dec.i.payload.last == (dut.rd_index == length - 1),
                                "the tracked frame is read back with its beats, last on its last (or the slot's)"),
                         Assert(dec.i.payload.first == (dut.rd_index == 0), "first on a frame's first beat read")]
            with m.If((dut.rd_index == tj) & (tj < length)):
                m.d.comb += Assert((byte(dec.i.payload.data) == t_data) & (dec.i.payload.keep == t_keep)
                                   & (dec.i.payload.last == t_last),
                                   "the tracked beat is read back as it came in, byte for byte")
        with m.If(ours & feed & dec.i.payload.last):
            m.d.sync += state.eq(0)
        # strengthening: the tracked frame's place, and its cells
        m.d.comb += Assert(state != 3, "tracked frame: a state of three")
        stored_ahead = Mux(slot >= rd, slot - rd, slot + S - rd)
        with m.If(state == 1):
            m.d.comb += Assert(arriving & (slot == wr), "tracked frame arriving: into the write slot")
        with m.If(state == 2):
            m.d.comb += [Assert(stored_ahead < stored, "tracked frame stored: behind the frames read before it"),
                         Assert((length >= 1) & (length <= B), "tracked frame: 1..slot beats"),
                         Assert(~(dec.have & (rd == slot)) | (dut.rd_index < length), "tracked frame: read within")]
        for k, cell in enumerate(self.cells):
            m.d.comb += cell.addr.eq(slot * B + k)
            written = Mux(state == 1, k < index, k < length)
            with m.If((state != 0) & written):
                m.d.comb += Assert(cell.data.last == Mux(state == 1, k == B - 1, k == length - 1),
                                   f"tracked frame: beat {k} stored with its last flag (the slot's last beat too)")
                with m.If(tj == k):
                    m.d.comb += Assert((byte(cell.data.data) == t_data) & (cell.data.keep == t_keep)
                                       & (cell.data.last == t_last), f"tracked frame: beat {k} stored as it came")
        m.d.comb += Cover(ours & feed & dec.i.payload.last & (length == B))
        return m


def test_return_buffer_prove():
    """The return buffer byte for byte, the RETURN judgement and the return slots (unbounded)."""
    prove(ReturnSpec(), "spill_return_buffer", depth=2, mode="prove")


def test_return_buffer_cover():
    """Not vacuous: a tracked two-beat frame read back (a packet spilled, asked for, returned)."""
    prove(ReturnSpec(), "spill_return_buffer_cover", depth=11, mode="cover")
