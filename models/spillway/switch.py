"""Cycle-accurate golden model of the disaggregated Spillway's switch side (``hdl/spillway/switch.py``)."""
import collections
import struct

from models import wire
from models.params import check
from models.spillway.arrival import MIN_LENGTH, flow_of, malformed
from models.spillway.credit import DROP, FORWARD, SPILL, CreditCoreModel
from models.spillway.link import DecapsulatorModel, EncapsulatorModel, H, _ones, spill_header
from models.spillway.params import SpillSwitchParams

__all__ = ["SpillSwitchModel", "return_slot_beats"]


def return_slot_beats(params):
    """Beats of one return-buffer slot: a RETURN frame with an inner frame of ``mtu`` bytes."""
    return -(-(params.mtu + H) // params.data_bytes)


class SpillSwitchModel:
    """Cycle-accurate model (``models/contract.py``) of ``SpillSwitch``, the switch side of the
    disaggregated Spillway; composes ``CreditCoreModel`` for the decisions.

    ``tick(beat, qdepth, o_ready, spill_o_ready, spill_i)`` takes one cycle's inputs (``beat`` the
    beat on ``i`` or None, ``spill_i`` the beat on the return link or None) and returns the outputs
    the RTL shows in that cycle, a dict: ``i_ready``, ``o`` (beat with ``meta = {port, spilled}``, or
    None), ``spill_o`` (beat or None), ``credits``; then advances the state as the clock edge does.
    Data bytes past ``keep`` are don't-care. Structure (each a register-level mirror of the RTL):

    - ingress: beats are written into a FIFO of ``buffer`` beats (visible from the next cycle) while
      it has room; the parser gives the arrival descriptor at the last beat to the credit core, whose
      verdict (with the beats written) goes into a verdict FIFO in the same edge. A packet longer
      than ``buffer`` beats: beats past the ``buffer``-th are accepted and discarded, the packet is
      malformed (DROP), so the FIFO never deadlocks;
    - head: the packet at the FIFO head (verdict present) goes beat by beat to ``o`` (FORWARD), to the
      encapsulator (SPILL, header ``spill_header(DATA, port, flow, seq)``) or is discarded (DROP,
      one beat per cycle);
    - drain requests: port ``q`` is held (``CreditCore.hold``) while all its unrequested packets are
      still to be sent on ``spill_o`` (a DRAIN frame must reach the node behind the DATA frame it asks
      for: the link is FIFO);
    - ``spill_o``: when the encapsulator is between frames and the core asks for a drain, the
      one-beat DRAIN frame (``spill_header(DRAIN, port, count=1)``) goes first (the request is made
      when ``spill_o.ready``); else the encapsulator's output;
    - return link (always ready): a frame's first beat is checked (EtherType, ``op = RETURN``, more
      than 22 bytes; else it counts as a return to port ``ports``: not ok) and offered to the core
      (``ret``); an accepted frame is written beat by beat into the next return-buffer slot of
      ``return_slot_beats`` beats (beats past the slot are discarded, the slot's last beat is marked
      last), committed at its last beat; committed slots go, in order, through the decapsulator,
      which takes the port/flow/seq of each frame from its first beat;
    - ``o``: arbitrated at packet boundaries, the decapsulator (returned packets, ``spilled=1``)
      before the FIFO head (``spilled=0``); a returned packet's last beat on ``o`` is the core's
      ``done``.

    ``step`` speaks the contract: every output port, ``credits`` and ``outstanding`` as they were before
    the cycle's edge.
    """

    KIND = "cycle"

    def __init__(self, params=None):
        p = self.params = check(params, SpillSwitchParams)
        self.W, self.ports, self.flows, self.buffer = p.data_bytes, p.ports, p.flows, p.buffer
        self.slots, self.slot_beats = p.return_slots, return_slot_beats(p)
        self.core = CreditCoreModel(p)
        self.reset()

    def reset(self):
        self.core.reset()
        self.inside, self.header, self.length, self.wcount, self.handle = False, b"", 0, 0, 0
        self.data, self.verdicts, self.hindex = collections.deque(), collections.deque(), 0
        self.enc, self.dec = EncapsulatorModel(self.W), DecapsulatorModel(self.W)
        self.rx_inside, self.wr_ok, self.wr_slot, self.wr_index = False, False, 0, 0
        self.mem = [[None] * self.slot_beats for _ in range(self.slots)]
        self.committed, self.rd_slot, self.rd_index = 0, 0, 0
        self.ret_hdr = (0, 0, 0)
        self.owner = None
        self.unsent = [0] * self.ports      # spilled packets not yet sent whole on spill_o, per port

    def counters(self):
        return self.core.counters()

    def outstanding(self):
        """Spilled packets not yet re-injected, over every port (each port's ``capacity`` less its credits)."""
        return self.ports * self.core.capacity - sum(self.core.credits)

    def step(self, inputs):
        outstanding = self.outstanding()
        spill_i = inputs["spill_i__payload"]
        r = self.tick(inputs["i__payload"], inputs["qdepth"], inputs["o__ready"], inputs["spill_o__ready"], spill_i)
        return {"i__ready": None if inputs["i__payload"] is None else int(r["i_ready"]),
                "o__valid": int(r["o"] is not None), "o__payload": r["o"],
                "spill_o__valid": int(r["spill_o"] is not None), "spill_o__payload": r["spill_o"],
                "spill_i__ready": 1, "credits": r["credits"], "outstanding": outstanding}

    def _arrival(self, beat, discard):
        header = self.header if self.inside else beat["data"].to_bytes(self.W, "little")[:MIN_LENGTH]
        length = ((self.length if self.inside else 0) + beat["keep"].bit_count()) & 0xFFFF
        port = beat["meta"]["port"]
        bad = discard or malformed(header, length, port, 1 << 16)
        flow = flow_of(header, self.flows) if len(header) >= MIN_LENGTH else 0
        return {"handle": self.handle, "port": port, "length": length, "flow": flow, "malformed": int(bad)}

    def tick(self, beat, qdepth, o_ready, spill_o_ready, spill_i=None):
        W, core = self.W, self.core
        # Ingress.
        discard = self.wcount == self.buffer
        i_ready = len(self.data) < self.buffer or discard
        take = beat is not None and i_ready
        write = take and not discard
        arrival = self._arrival(beat, discard) if take and beat["last"] else None

        # FIFO head.
        verdict = self.verdicts[0] if self.verdicts else None
        hbeat = self.data[0] if verdict is not None else None
        kind = verdict["kind"] if verdict is not None else None
        f_beat = (dict(hbeat, first=int(self.hindex == 0), meta={"port": verdict["port"] & 0xFF, "spilled": 0})
                  if kind == FORWARD else None)
        s_beat = dict(hbeat, first=int(self.hindex == 0), meta={}) if kind == SPILL else None
        hdr = spill_header(wire.SPILL_DATA, verdict["port"], verdict["flow"], verdict["seq"]) if kind == SPILL else None

        # Return buffer read side and decapsulator.
        r_in = self.mem[self.rd_slot][self.rd_index] if self.committed else None
        r_out = self.dec.out(r_in)
        if r_out is not None:
            r_out = dict(r_out, meta={"port": self.ret_hdr[0], "spilled": 1})

        # o arbitration (packet boundaries, returns first).
        sel_r = self.owner == "R" or (self.owner is None and r_out is not None)
        sel_f = self.owner == "F" or (self.owner is None and r_out is None and f_beat is not None)
        o = r_out if sel_r else (f_beat if sel_f else None)
        r_ready, f_ready = o_ready and sel_r, o_ready and sel_f
        done = None
        if sel_r and o is not None and o_ready and o["last"]:
            port, flow, seq = self.ret_hdr
            done = {"port": port, "flow": flow, "seq": seq}

        # spill_o: a drain request first at frame boundaries, else the encapsulator.
        enc_busy = self.enc.inside or self.enc.extra
        req_ready = not enc_busy and spill_o_ready
        e_out = self.enc.out(s_beat, hdr)

        # Return link, first beat.
        ret = None
        rx_first = spill_i is not None and not self.rx_inside
        if rx_first:
            raw = spill_i["data"].to_bytes(W, "little")
            good = (int.from_bytes(raw[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") == wire.ETHERTYPE_SPILL
                    and raw[wire.SPILL_OP_AT] == wire.SPILL_RETURN
                    and not (spill_i["last"] and not spill_i["keep"] >> H & 1))
            ret = raw[wire.SPILL_PORT_AT] if good else self.ports

        credits = list(core.credits)
        hold = [unasked <= unsent for unasked, unsent in zip(core.unasked, self.unsent)]
        _, core_verdict, req, ret_ok = core.step(arrival, qdepth, True, req_ready, ret, done, hold)
        drain_sel = req is not None and not enc_busy
        if drain_sel:
            spill_o = {"data": int.from_bytes(spill_header(wire.SPILL_DRAIN, req, count=1), "little"),
                       "keep": _ones(H), "first": 1, "last": 1, "meta": {}}
        else:
            spill_o = e_out
        e_ready = spill_o_ready and not drain_sel
        outputs = {"i_ready": i_ready, "o": o, "spill_o": spill_o, "credits": credits}

        # The clock edge. Ingress.
        if take:
            if not self.inside:
                self.header, self.length = beat["data"].to_bytes(W, "little")[:MIN_LENGTH], 0
            self.length += beat["keep"].bit_count()
            self.inside = not beat["last"]
        pop_f = f_beat is not None and f_ready
        pop_s = s_beat is not None and self.enc.i_ready(e_ready)
        pop = pop_f or pop_s or kind == DROP
        self.enc.edge(s_beat, e_ready)
        if core_verdict is not None and core_verdict["kind"] == SPILL:
            self.unsent[core_verdict["port"]] += 1
        if pop_s and (hbeat["last"] or self.hindex + 1 == verdict["beats"]):
            self.unsent[verdict["port"]] -= 1
        if pop:
            end = hbeat["last"] or self.hindex + 1 == verdict["beats"]
            self.data.popleft()
            if end:
                self.verdicts.popleft()
            self.hindex = 0 if end else self.hindex + 1
        if write:
            self.data.append({"data": beat["data"], "keep": beat["keep"], "last": beat["last"]})
            assert len(self.data) <= self.buffer
        if take:
            if beat["last"]:
                self.verdicts.append(dict(core_verdict, beats=self.wcount + write))
                self.handle = (self.handle + 1) % (1 << self.params.handle_bits)
                assert len(self.verdicts) <= self.buffer
            self.wcount = 0 if beat["last"] else self.wcount + write

        # Return buffer read side.
        if r_in is not None and self.dec.i_ready(r_ready):
            if self.rd_index == 0:
                raw = r_in["data"].to_bytes(W, "little")
                flow, seq = struct.unpack_from(">HH", raw, wire.SPILL_FLOW_AT)
                self.ret_hdr = (raw[wire.SPILL_PORT_AT], flow, seq)
            if r_in["last"]:
                self.rd_index, self.rd_slot, self.committed = 0, (self.rd_slot + 1) % self.slots, self.committed - 1
            else:
                self.rd_index += 1
        self.dec.edge(r_in, r_ready)
        if o is not None and o_ready:
            self.owner = None if o["last"] else ("R" if sel_r else "F")

        # Return buffer write side.
        if spill_i is not None:
            ok = ret_ok if rx_first else self.wr_ok
            if ok and self.wr_index < self.slot_beats:
                self.mem[self.wr_slot][self.wr_index] = {
                    "data": spill_i["data"], "keep": spill_i["keep"],
                    "last": int(spill_i["last"] or self.wr_index == self.slot_beats - 1)}
            if ok and spill_i["last"]:
                self.wr_slot, self.committed = (self.wr_slot + 1) % self.slots, self.committed + 1
                assert self.committed <= self.slots
            if rx_first:
                self.wr_ok = ret_ok
            self.rx_inside = not spill_i["last"]
            self.wr_index = 0 if spill_i["last"] else min(self.wr_index + 1, self.slot_beats)
        return outputs
