"""cocotb side of the benchmark (run by tools/bench.py through testbenches.runner).

``standard`` drives the stimulus with the testbench's own StreamSource/StreamSink (a coroutine per
interface waking every cycle); ``batched`` is the fast path: one coroutine per clock drives the
input from pre-packed beats and samples every output, reading a handle only when it matters.
"""
import json
import os
import time

import cocotb
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time

from testbenches import tb


def _stimulus():
    return json.loads(open(os.environ["INNET_BENCH_STIM"]).read())


def _report(spec, start_ns, start_s, packets):
    (tb.run_dir() / "bench.json").write_text(json.dumps({
        "cycles": int((get_sim_time("ns") - start_ns) / 2), "packets_out": packets,
        "seconds": time.perf_counter() - start_s, "beats_in": len(spec["beats"])}))


def _is_packet_end(word, last):
    return last < 0 or (word >> last) & 1


@cocotb.test()
async def standard(dut):
    """Stimulus through the testbenches' StreamSource / StreamSink in raw-payload mode."""
    spec = _stimulus()
    tb.start_clock(dut)
    await tb.reset(dut)
    source = tb.StreamSource(dut, "i", None)
    sinks = [(tb.StreamSink(dut, name, None), last) for name, last in spec["outputs"]]
    start_ns, start_s = get_sim_time("ns"), time.perf_counter()
    for word in spec["beats"]:
        source.send_nowait(word)
    await source.wait_idle()
    for _ in range(32):
        await RisingEdge(dut.clk)
    packets = sum(_is_packet_end(w, last) for sink, last in sinks for w in sink.queue)
    _report(spec, start_ns, start_s, packets)


@cocotb.test()
async def batched(dut):
    """One coroutine per clock: pre-packed beats in, outputs always ready, valid read first."""
    spec = _stimulus()
    tb.start_clock(dut)
    await tb.reset(dut)
    outputs = [(getattr(dut, f"{name}__valid"), getattr(dut, f"{name}__payload"), last)
               for name, last in spec["outputs"]]
    for name, _ in spec["outputs"]:
        getattr(dut, f"{name}__ready").value = 1
    valid, ready, payload = dut.i__valid, dut.i__ready, dut.i__payload
    beats, edge = spec["beats"], RisingEdge(dut.clk)
    start_ns, start_s = get_sim_time("ns"), time.perf_counter()
    packets, next_beat, idle = 0, 0, 0
    valid.value = 1
    payload.value = beats[0]
    while idle < 32:
        await edge
        moved = False
        for out_valid, out_payload, last in outputs:
            if out_valid.value:
                moved = True
                packets += last < 0 or (out_payload.value.to_unsigned() >> last) & 1
        if next_beat < len(beats) and ready.value:
            next_beat += 1
            moved = True
            if next_beat < len(beats):
                payload.value = beats[next_beat]
            else:
                valid.value = 0
        idle = 0 if moved or next_beat < len(beats) else idle + 1
    _report(spec, start_ns, start_s, packets)
