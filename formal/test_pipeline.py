"""Bounded proofs of the switch pipeline's packet store and egress (hdl/pipeline.py).

The stages are proved on their own (formal/test_<block>.py); this spec drives every input of a
small ``Pipeline`` freely (ingress beats, ``cfg``, queue depths, ``o.ready``) and checks the
bookkeeping that joins them:

- the store is never written where a packet is waiting: an entry being written is free;
- busy entries are exactly the spill buffer's packets: pending in its FIFOs or in its output
  register (``popcount(busy) == pending + o.valid``), and the egress only reads a busy entry;
- conservation at egress (modulo the counter width): every descriptor that left the spill buffer
  was sent on ``o`` as a whole packet or dropped as ``oversize``.

A bounded check from reset (the stage internals are too wide for an induction without their own
invariants); covers show a store stall, an oversize drop and a drained packet sent.
"""
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cover, Elaboratable, Module, Signal, Value

from formal.runner import prove
from hdl.pipeline import Pipeline, PipelineParams

PARAMS = PipelineParams.of(
    agg=dict(policy="esa", slots=1, workers=2, values=1), sym=dict(jobs=1, ring=2, table=2),
    spill=dict(ports=2, high=2, low=1, capacity=2, drain_rate=1, drain_window=2, flows=2, depth_bits=2,
               handle_bits=2, mode="inswitch"), beats=1, data_bytes=64, counter_bits=4)


class Spec(Elaboratable):
    """Pipeline with free inputs; store and egress bookkeeping properties."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = Pipeline(PARAMS)
        for port in (dut.i.valid, dut.i.payload, dut.cfg.valid, dut.cfg.payload, dut.qdepth, dut.o.ready):
            m.d.comb += port.eq(AnySeq(len(Value.cast(port))))
        spill = dut.spill
        busy = Signal(range(len(dut.busy) + 1))
        m.d.comb += busy.eq(sum(dut.busy[k] for k in range(len(dut.busy))))
        handle = spill.core.d.payload.handle
        entering = spill.i.valid & spill.i.ready
        sent = Signal(PARAMS.spill.counter_bits)            # whole packets sent on o
        with m.If(dut.o.valid & dut.o.ready & dut.o.payload.last):
            m.d.sync += sent.eq(sent + 1)
        left = Signal(PARAMS.spill.counter_bits)            # descriptors that left the spill buffer
        m.d.comb += left.eq(spill.forwarded + spill.drained - spill.o.valid)
        m.d.comb += [
            Assert(~(entering & dut.busy.bit_select(handle, 1)), "a busy store entry was written"),
            Assert(busy == spill.pending + spill.o.valid, "busy entries != the spill buffer's packets"),
            Assert(~spill.o.valid | dut.busy.bit_select(spill.o.payload.handle, 1),
                   "egress reads a free store entry"),
            Assert(left == sent + dut.oversize,
                   "a descriptor left without its packet being sent or counted oversize"),
            Cover(dut.store_stalls != 0),
            Cover(dut.oversize != 0),
            Cover(dut.o.valid & dut.o.payload.meta.spilled),
        ]
        return m


def test_pipeline_bmc():
    result = prove(Spec(), "pipeline_bmc", depth=8, mode="bmc")
    print(f"pipeline: {result.mode} depth {result.depth} in {result.seconds:.1f} s")


def test_pipeline_cover():
    prove(Spec(), "pipeline_cover", depth=14, mode="cover")
