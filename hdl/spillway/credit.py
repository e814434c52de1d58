"""The disaggregated Spillway switch side's decisions: per-port credits for the spill node, drain requests,
and the bookkeeping of returns."""
from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from hdl.spillway.arrival import arrival_layout
from hdl.spillway.link import SEQ_BITS
from models.params import check
from models.spillway.credit import CREDIT_COUNTERS, SPILL
from models.spillway.params import SpillSwitchParams

__all__ = ["CreditCore", "verdict_layout"]


def verdict_layout(handle_bits=16, flows=16):
    """What ``CreditCore`` decides for an arrival: the descriptor, its spill ``seq`` and ``kind``
    (``models.spillway.credit.FORWARD``, ``SPILL`` or ``DROP``)."""
    return data.StructLayout({"handle": handle_bits, "port": 8, "length": 16, "flow": range(flows),
                              "seq": SEQ_BITS, "kind": 2})


class CreditCore(wiring.Component):
    """Disaggregated Spillway, descriptor level: spill decisions with per-port credits for the spill
    node, drain requests, and the bookkeeping of returns (see ``models.spillway.credit.CreditCoreModel``,
    which this matches cycle for cycle).

    Ports: ``d`` arrivals (as ``SpillCore``); ``v`` the verdict of the arrival on ``d`` in the same
    cycle (``d.ready = v.ready``); ``qdepth``; ``req`` drain requests (origin ``port``; port ``q`` is not eligible while
    ``hold[q]``); ``ret_valid``
    / ``ret_port`` a RETURN frame's first beat (``ret_bad``: its header is not a RETURN's, never ok)
    and ``ret_ok`` whether it was asked for; ``done_*`` a
    re-injected packet's last beat (its port, flow and seq from the spill header); ``credits[p]``.
    State (public for the formal spec): ``credit``, ``unasked``, ``asked``, ``seqs``, ``expect``,
    ``flow_count``, ``reserved``, ``window``, ``used``, ``rr``.
    """

    def __init__(self, params=None):
        p = self.params = check(params, SpillSwitchParams)
        P, C, F = p.ports, p.capacity, p.flows
        self.ports, self.capacity, self.flows = P, C, F
        signature = {
            "d": In(stream.Signature(arrival_layout(p.handle_bits, F))),
            "v": Out(stream.Signature(verdict_layout(p.handle_bits, F))),
            "qdepth": In(data.ArrayLayout(p.depth_bits, P)),
            "req": Out(stream.Signature(data.StructLayout({"port": 8}))),
            "hold": In(P),
            "ret_valid": In(1), "ret_port": In(8), "ret_bad": In(1), "ret_ok": Out(1),
            "done_valid": In(1), "done_port": In(8), "done_flow": In(SEQ_BITS), "done_seq": In(SEQ_BITS),
            "credits": Out(data.ArrayLayout(range(C + 1), P)),
        }
        signature.update({name: Out(p.counter_bits) for name in CREDIT_COUNTERS})
        super().__init__(signature)
        self.credit = [Signal(range(C + 1), name=f"credit{q}", init=C) for q in range(P)]
        self.unasked = [Signal(range(C + 1), name=f"unasked{q}") for q in range(P)]
        self.asked = [Signal(range(C + 1), name=f"asked{q}") for q in range(P)]
        self.seqs = [Signal(SEQ_BITS, name=f"seq{q}") for q in range(P)]
        self.expect = [Signal(SEQ_BITS, name=f"expect{q}") for q in range(P)]
        self.flow_count = [Signal(range(P * C + 1), name=f"flow_count{f}") for f in range(F)]
        self.reserved = Signal(range(p.return_slots + 1))
        self.window = Signal(range(p.drain_window))
        self.used = Signal(range(p.drain_rate + 1))
        self.rr = Signal(range(P))
        self.decided = Signal()                 # a verdict is taken in this cycle
        self.requested = Signal()               # a drain request is made in this cycle

    def elaborate(self, platform):
        m = Module()
        p = self.params
        P, C = self.ports, self.capacity
        bits = max(1, (P - 1).bit_length())
        credit, asked, seqs = Array(self.credit), Array(self.asked), Array(self.seqs)
        flow_count = Array(self.flow_count)
        a = self.d.payload
        port = a.port[:bits]
        port_ok = a.port < P
        bad = a.malformed | ~port_ok
        ordered = (flow_count[a.flow] != 0) if p.order == "flow" else (credit[port] != C)
        must_spill = ~bad & ((Array(self.qdepth)[port] >= p.high) | ordered)
        oversize = must_spill & (a.length > p.mtu)
        overflow = must_spill & ~oversize & (credit[port] == 0)
        spill = must_spill & ~oversize & ~overflow
        forward = ~bad & ~must_spill
        kind = Mux(spill, SPILL, Mux(forward, 0, 2))
        m.d.comb += [
            self.d.ready.eq(self.v.ready), self.v.valid.eq(self.d.valid),
            self.v.payload.handle.eq(a.handle), self.v.payload.port.eq(a.port),
            self.v.payload.length.eq(a.length), self.v.payload.flow.eq(a.flow),
            self.v.payload.seq.eq(Mux(spill, seqs[port], 0)), self.v.payload.kind.eq(kind),
            self.decided.eq(self.d.valid & self.v.ready),
        ]
        take = self.decided & spill

        # Drain request: round-robin over eligible ports, rate and return-slot limits.
        eligible = Cat(*((self.unasked[q] != 0) & (self.qdepth[q] <= p.low) & ~self.hold[q] for q in range(P)))
        chosen = Signal(range(P))
        found = Signal()
        for offset in reversed(range(P)):
            q = (self.rr + offset) % P
            with m.If(eligible.bit_select(q, 1)):
                m.d.comb += [chosen.eq(q), found.eq(1)]
        m.d.comb += [
            self.req.valid.eq(found & (self.used < p.drain_rate) & (self.reserved < p.return_slots)),
            self.req.payload.port.eq(chosen),
            self.requested.eq(self.req.valid & self.req.ready),
        ]

        # Returns: a frame's first beat, and a re-injected packet's last beat.
        ret_port = self.ret_port[:bits]
        m.d.comb += self.ret_ok.eq(self.ret_valid & ~self.ret_bad & (self.ret_port < P) & (asked[ret_port] != 0))
        done_port = self.done_port[:bits]
        done_flow = self.done_flow[:max(1, (self.flows - 1).bit_length())]
        misordered = self.done_valid & (self.done_seq != Array(self.expect)[done_port])

        for q in range(P):
            spend = take & (port == q)
            refund = self.done_valid & (done_port == q)
            ask = self.requested & (chosen == q)
            got = self.ret_ok & (ret_port == q)
            m.d.sync += [
                self.credit[q].eq(self.credit[q] - spend + refund),
                self.unasked[q].eq(self.unasked[q] + spend - ask),
                self.asked[q].eq(self.asked[q] + ask - got),
            ]
            with m.If(spend):
                m.d.sync += self.seqs[q].eq(self.seqs[q] + 1)
            with m.If(refund):
                m.d.sync += self.expect[q].eq(self.expect[q] + 1)
        for f in range(self.flows):
            m.d.sync += self.flow_count[f].eq(self.flow_count[f] + (take & (a.flow == f))
                                              - (self.done_valid & (done_flow == f)))
        m.d.sync += self.reserved.eq(self.reserved + self.requested - self.done_valid)
        with m.If(self.window == p.drain_window - 1):
            m.d.sync += [self.window.eq(0), self.used.eq(0)]
        with m.Else():
            m.d.sync += [self.window.eq(self.window + 1), self.used.eq(self.used + self.requested)]
        with m.If(self.requested):
            m.d.sync += self.rr.eq(Mux(chosen == P - 1, 0, chosen + 1))

        for name, event in (("forwarded", self.decided & forward), ("spilled", take),
                            ("reinjected", self.done_valid), ("spill_overflow", self.decided & overflow),
                            ("spill_oversize", self.decided & oversize), ("malformed", self.decided & bad),
                            ("drain_requests", self.requested),
                            ("return_malformed", self.ret_valid & ~self.ret_ok), ("misordered", misordered)):
            count_event(m, getattr(self, name), event, overflow="wrap")
        m.d.comb += [self.credits[q].eq(self.credit[q]) for q in range(P)]
        return m
