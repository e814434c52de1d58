"""The switch side of the disaggregated Spillway (SPEC section 1), as the paper describes it: spilled packets
leave whole on the spill link for a spill node and come back when asked for."""
from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.headers import SPILL_HEADER_BYTES
from hdl.packet import packet_signature
from hdl.read_ahead_fifo import ReadAheadFIFO
from hdl.spillway.arrival import parse_arrival
from hdl.spillway.credit import CreditCore, verdict_layout
from hdl.spillway.link import SEQ_BITS, Decapsulator, Encapsulator, header, link_layout
from models.params import check
from models.spillway.credit import CREDIT_COUNTERS, DROP, FORWARD, SPILL
from models.spillway.params import SpillSwitchParams
from models.spillway.switch import return_slot_beats
from models.wire import (
    ETHERTYPE_AT,
    ETHERTYPE_SPILL,
    SPILL_DATA,
    SPILL_DRAIN,
    SPILL_FLOW_AT,
    SPILL_OP_AT,
    SPILL_PORT_AT,
    SPILL_RETURN,
    SPILL_SEQ_AT,
)

__all__ = ["SpillSwitch"]


class SpillSwitch(wiring.Component):
    """The switch side of the disaggregated Spillway: spills packets of congested egress ports to a spill
    node over the spill link, asks for them back once their queue has room, and re-injects them.

    Ports: ``i`` packets in (egress port in ``meta.port``), ``qdepth`` the egress queues' depths (as
    the in-switch baseline); ``o`` the packet stream out (``meta = {port, spilled}``: forwarded and
    re-injected packets); ``spill_o`` / ``spill_i`` the spill link (``spill_i.ready`` always 1);
    ``credits[p]``; ``outstanding`` (spilled, not yet re-injected); one port per ``CREDIT_COUNTERS``.
    The cycle-level behaviour is ``models.spillway.switch.SpillSwitchModel``'s docstring: an ingress
    FIFO of ``buffer`` beats, the parser and ``CreditCore``'s verdict at a packet's last beat; the head
    packet forwarded, encapsulated onto ``spill_o`` (DATA) or discarded; DRAIN requests on ``spill_o``
    at frame boundaries, only once the DATA frame they ask for has left; RETURN frames from ``spill_i``
    into ``return_slots`` slots of the return buffer, decapsulated and re-injected ahead of new packets,
    in per-flow order. The ingress FIFOs (``ReadAheadFIFO``) and the return buffer are SRAM with a
    registered read (block RAM on an FPGA), read at the next cycle's position: no latency added.
    """

    def __init__(self, params=None):
        p = self.params = check(params, SpillSwitchParams)
        self.core = CreditCore(p)
        self.ports, self.capacity, self.data_bytes, self.flows = p.ports, p.capacity, p.data_bytes, p.flows
        self.buffer, self.slots, self.slot_beats = p.buffer, p.return_slots, return_slot_beats(p)
        self.out_meta = data.StructLayout({"port": 8, "spilled": 1})
        self.link = link_layout(p.data_bytes)
        signature = {
            "i": In(packet_signature(p.data_bytes)),
            "o": Out(packet_signature(p.data_bytes, self.out_meta)),
            "qdepth": In(data.ArrayLayout(p.depth_bits, p.ports)),
            "spill_o": Out(stream.Signature(self.link)),
            "spill_i": In(stream.Signature(self.link)),
            "credits": Out(data.ArrayLayout(range(p.capacity + 1), p.ports)),
            "outstanding": Out(range(p.ports * p.capacity + 1)),
        }
        signature.update({name: Out(p.counter_bits) for name in CREDIT_COUNTERS})
        super().__init__(signature)
        # The return buffer, public for the formal spec: its memory (``return_slots`` slots of ``slot_beats``
        # beats), the receive side (inside a frame, that frame accepted, its slot and next beat), the frames
        # committed and not yet read, and the read side (slot and next beat).
        B, S = self.slot_beats, self.slots
        cell = data.StructLayout({"data": 8 * p.data_bytes, "keep": p.data_bytes, "last": 1})
        self.ret_mem = memory.Memory(shape=cell, depth=S * B, init=[])
        self.rx_inside, self.wr_ok = Signal(name="rx_inside"), Signal(name="wr_ok")
        self.wr_slot, self.wr_index = Signal(range(S), name="wr_slot"), Signal(range(B + 1), name="wr_index")
        self.committed = Signal(range(S + 1))
        self.rd_slot, self.rd_index = Signal(range(S), name="rd_slot"), Signal(range(B), name="rd_index")
        self.ret_port = Signal(8, name="ret_port")      # the origin port of the frame being read (its header)
        self.enc, self.dec = Encapsulator(p.data_bytes), Decapsulator(p.data_bytes)
        self.owner = Signal(2, name="owner")   # o's packet in progress: 0 none, 1 a returned, 2 a forwarded one
        # The ingress FIFOs of beats and of verdicts (public for the formal spec: their storage is readable).
        self.cell = cell
        self.entry = data.StructLayout({"verdict": verdict_layout(p.handle_bits, p.flows),
                                        "beats": range(p.buffer + 1)})
        self.beat_fifo = ReadAheadFIFO(width=cell.size, depth=p.buffer)
        self.verdict_fifo = ReadAheadFIFO(width=self.entry.size, depth=p.buffer)
        # Ingress bookkeeping (public for the formal spec): beats of the arriving packet written, beats of the
        # head packet popped, and per port the spilled packets whose DATA frame has not been taken whole.
        self.wcount = Signal(range(p.buffer + 1), name="wcount")
        self.hindex = Signal(range(p.buffer), name="hindex")
        self.unsent = [Signal(range(p.capacity + 1), name=f"unsent{q}") for q in range(p.ports)]

    def elaborate(self, platform):
        m = Module()
        p = self.params
        P, C, B, S = self.ports, self.capacity, self.slot_beats, self.slots
        H = SPILL_HEADER_BYTES
        m.submodules.core = core = self.core
        m.submodules.enc = enc = self.enc
        m.submodules.dec = dec = self.dec
        cell, entry = self.cell, self.entry
        m.submodules.beats = beats = self.beat_fifo
        m.submodules.verdicts = verdicts = self.verdict_fifo

        # --- Ingress: the FIFO of beats, the parser and the credit core's verdict at the last beat.
        beat = self.i.payload
        wcount = self.wcount                    # beats of the current packet written (saturates)
        discard = wcount == p.buffer            # a giant packet: its further beats are discarded
        m.d.comb += self.i.ready.eq(beats.w_rdy | discard)
        transfer = self.i.valid & self.i.ready
        write = transfer & ~discard
        length, flow, malformed = parse_arrival(m, beat, transfer, self.flows)
        w_cell = data.View(cell, beats.w_data)
        m.d.comb += [beats.w_en.eq(write), w_cell.data.eq(beat.data), w_cell.keep.eq(beat.keep),
                     w_cell.last.eq(beat.last)]
        handle = Signal(p.handle_bits)
        m.d.comb += [
            core.d.valid.eq(transfer & beat.last),
            core.d.payload.handle.eq(handle),
            core.d.payload.port.eq(beat.meta.port),
            core.d.payload.length.eq(length),
            core.d.payload.flow.eq(flow),
            core.d.payload.malformed.eq(malformed | discard),
            core.v.ready.eq(1),                 # the verdict FIFO holds at most one entry per beat held
            core.qdepth.eq(self.qdepth),
        ]
        w_entry = data.View(entry, verdicts.w_data)
        m.d.comb += [verdicts.w_en.eq(core.d.valid), w_entry.verdict.eq(core.v.payload),
                     w_entry.beats.eq(wcount + write)]
        with m.If(transfer):
            m.d.sync += wcount.eq(Mux(beat.last, 0, wcount + write))
            with m.If(beat.last):
                m.d.sync += handle.eq(handle + 1)

        # --- FIFO head: forward (to o), spill (to the encapsulator) or discard.
        head = data.View(entry, verdicts.r_data)
        hbeat = data.View(cell, beats.r_data)
        verdict = head.verdict
        hindex = self.hindex
        have = verdicts.r_rdy
        fwd_valid = have & (verdict.kind == FORWARD)
        drop = have & (verdict.kind == DROP)
        m.d.comb += [
            enc.i.valid.eq(have & (verdict.kind == SPILL)),
            enc.i.payload.data.eq(hbeat.data), enc.i.payload.keep.eq(hbeat.keep),
            enc.i.payload.last.eq(hbeat.last), enc.i.payload.first.eq(hindex == 0),
            enc.hdr.eq(header(SPILL_DATA, verdict.port[:8], verdict.flow, verdict.seq)),
        ]

        # --- Return buffer: read side through the decapsulator.
        m.submodules.ret_mem = mem = self.ret_mem
        committed = self.committed
        rd_slot, rd_index = self.rd_slot, self.rd_index
        ret_port, ret_flow, ret_seq = self.ret_port, Signal(SEQ_BITS), Signal(SEQ_BITS)
        # SRAM with a registered read: the address is the next cycle's read position, written through
        # when the return link writes there in this cycle (what a combinational read would show then).
        write_port = mem.write_port()
        read = mem.read_port(transparent_for=(write_port,))
        m.d.comb += [dec.i.valid.eq(committed != 0),
                     dec.i.payload.data.eq(read.data.data), dec.i.payload.keep.eq(read.data.keep),
                     dec.i.payload.last.eq(read.data.last), dec.i.payload.first.eq(rd_index == 0)]
        rd_last = dec.i.valid & dec.i.ready & read.data.last
        next_slot, next_index = Signal.like(rd_slot), Signal.like(rd_index)
        m.d.comb += [next_slot.eq(rd_slot), next_index.eq(rd_index)]
        with m.If(dec.i.valid & dec.i.ready):
            m.d.comb += next_index.eq(Mux(read.data.last, 0, rd_index + 1))
            with m.If(read.data.last):
                m.d.comb += next_slot.eq(Mux(rd_slot == S - 1, 0, rd_slot + 1))
        m.d.sync += [rd_slot.eq(next_slot), rd_index.eq(next_index)]
        m.d.comb += read.addr.eq(next_slot * B + next_index)
        with m.If(dec.i.valid & dec.i.ready):
            with m.If(rd_index == 0):
                octets = [read.data.data[8 * k:8 * k + 8] for k in range(H)]
                m.d.sync += [ret_port.eq(octets[SPILL_PORT_AT]),
                             ret_flow.eq(Cat(octets[SPILL_FLOW_AT + 1], octets[SPILL_FLOW_AT])),
                             ret_seq.eq(Cat(octets[SPILL_SEQ_AT + 1], octets[SPILL_SEQ_AT]))]

        # --- o: packet-boundary arbitration, returned packets first.
        owner = self.owner
        sel_r = (owner == 1) | ((owner == 0) & dec.o.valid)
        sel_f = (owner == 2) | ((owner == 0) & ~dec.o.valid & fwd_valid)
        out = self.o.payload
        with m.If(sel_r):
            m.d.comb += [self.o.valid.eq(dec.o.valid), out.data.eq(dec.o.payload.data),
                         out.keep.eq(dec.o.payload.keep), out.first.eq(dec.o.payload.first),
                         out.last.eq(dec.o.payload.last), out.meta.port.eq(ret_port), out.meta.spilled.eq(1)]
        with m.Elif(sel_f):
            m.d.comb += [self.o.valid.eq(fwd_valid), out.data.eq(hbeat.data), out.keep.eq(hbeat.keep),
                         out.first.eq(hindex == 0), out.last.eq(hbeat.last), out.meta.port.eq(verdict.port[:8]),
                         out.meta.spilled.eq(0)]
        m.d.comb += dec.o.ready.eq(self.o.ready & sel_r)
        sent = self.o.valid & self.o.ready
        with m.If(sent):
            m.d.sync += owner.eq(Mux(out.last, 0, Mux(sel_r, 1, 2)))
        m.d.comb += [core.done_valid.eq(sent & sel_r & out.last), core.done_port.eq(ret_port),
                     core.done_flow.eq(ret_flow), core.done_seq.eq(ret_seq)]

        # --- spill_o: a DRAIN frame first at frame boundaries, else the encapsulator.
        enc_busy = enc.inside | enc.extra
        drain_sel = core.req.valid & ~enc_busy
        m.d.comb += [core.req.ready.eq(~enc_busy & self.spill_o.ready),
                     enc.o.ready.eq(self.spill_o.ready & ~drain_sel)]
        with m.If(drain_sel):
            m.d.comb += [self.spill_o.valid.eq(1),
                         self.spill_o.payload.data.eq(header(SPILL_DRAIN, core.req.payload.port, 0, 0, 1)),
                         self.spill_o.payload.keep.eq((1 << H) - 1),
                         self.spill_o.payload.first.eq(1), self.spill_o.payload.last.eq(1)]
        with m.Else():
            m.d.comb += [self.spill_o.valid.eq(enc.o.valid), self.spill_o.payload.eq(enc.o.payload)]

        # Head pops: a beat forwarded, taken by the encapsulator, or discarded.
        pop = (fwd_valid & self.o.ready & sel_f) | (enc.i.valid & enc.i.ready) | drop
        end = hbeat.last | (hindex + 1 == head.beats)
        m.d.comb += [beats.r_en.eq(pop), verdicts.r_en.eq(pop & end)]
        with m.If(pop):
            m.d.sync += hindex.eq(Mux(end, 0, hindex + 1))

        # A drain request for port q only while some of q's unrequested packets have left on spill_o
        # (the DRAIN frame must reach the node behind the DATA frame it asks for).
        spilled_now = core.decided & (core.v.payload.kind == SPILL)
        sent_now = enc.i.valid & enc.i.ready & end
        unsent = self.unsent
        for q in range(P):
            m.d.sync += unsent[q].eq(unsent[q] + (spilled_now & (core.v.payload.port == q))
                                     - (sent_now & (verdict.port == q)))
            m.d.comb += core.hold[q].eq(core.unasked[q] <= unsent[q])

        # --- Return link: first-beat check, write into the next slot, commit at the last beat.
        rx = self.spill_i.valid
        rbeat = self.spill_i.payload
        m.d.comb += self.spill_i.ready.eq(1)
        rx_inside, wr_ok = self.rx_inside, self.wr_ok
        wr_slot, wr_index = self.wr_slot, self.wr_index
        first = rx & ~rx_inside
        octets = [rbeat.data[8 * k:8 * k + 8] for k in range(H)]
        good = ((Cat(octets[ETHERTYPE_AT + 1], octets[ETHERTYPE_AT]) == ETHERTYPE_SPILL)
                & (octets[SPILL_OP_AT] == SPILL_RETURN) & ~(rbeat.last & ~rbeat.keep[H]))
        m.d.comb += [core.ret_valid.eq(first), core.ret_port.eq(octets[SPILL_PORT_AT]), core.ret_bad.eq(~good)]
        ok = Mux(first, core.ret_ok, wr_ok)
        m.d.comb += [write_port.addr.eq(wr_slot * B + wr_index), write_port.en.eq(rx & ok & (wr_index < B)),
                     write_port.data.data.eq(rbeat.data), write_port.data.keep.eq(rbeat.keep),
                     write_port.data.last.eq(rbeat.last | (wr_index == B - 1))]
        commit = rx & ok & rbeat.last
        with m.If(rx):
            m.d.sync += [rx_inside.eq(~rbeat.last),
                         wr_index.eq(Mux(rbeat.last, 0, Mux(wr_index == B, B, wr_index + 1)))]
            with m.If(first):
                m.d.sync += wr_ok.eq(core.ret_ok)
        with m.If(commit):
            m.d.sync += wr_slot.eq(Mux(wr_slot == S - 1, 0, wr_slot + 1))
        m.d.sync += committed.eq(committed + commit - rd_last)

        m.d.comb += [self.credits[q].eq(core.credits[q]) for q in range(P)]
        m.d.comb += self.outstanding.eq(P * C - sum(core.credits[q] for q in range(P)))
        m.d.comb += [getattr(self, name).eq(getattr(core, name)) for name in CREDIT_COUNTERS]
        return m
