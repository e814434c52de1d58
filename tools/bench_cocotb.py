"""cocotb side of the benchmark (run by tools/bench.py through testbenches.runner).

``standard`` drives the stimulus with the testbench's own StreamSource/StreamSink (a coroutine per
interface waking every cycle); ``batched``: one coroutine per clock drives the input from pre-packed
beats and samples every output, reading a handle only when it matters; ``replay`` (on the
tools.replay wrapper) writes the beats once and lets Verilator run with no Python per cycle.
"""
import json
import os
import time

import cocotb
from cocotb.triggers import RisingEdge, Timer
from cocotb.utils import get_sim_time

from testbenches import tb


def _stimulus():
    return json.loads(open(os.environ["INNET_BENCH_STIM"]).read())


def _report(spec, start_ns, start_s, packets, cycles=None):
    if cycles is None:
        cycles = int((get_sim_time("ns") - start_ns) / 2)
    (tb.run_dir() / "bench.json").write_text(json.dumps({
        "cycles": cycles, "packets_out": packets,
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


@cocotb.test()
async def replay(dut):
    """No Python per cycle: beats written once into the Replay wrapper, then one Timer per chunk."""
    spec = _stimulus()
    tb.start_clock(dut)
    await tb.reset(dut)
    start_ns, start_s = get_sim_time("ns"), time.perf_counter()
    stimulus, depth = dut.stimulus, spec["replay_depth"]
    for index, word in enumerate(spec["beats"][:depth]):
        stimulus[index].value = word
    dut.beats.value = depth
    dut.rounds.value = len(spec["beats"]) // depth
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    while not dut.done.value:
        await Timer(2 * 4096, "ns")
    await Timer(2 * 32, "ns")
    _report(spec, start_ns, start_s, int(dut.packets.value), int(dut.cycles.value))


@cocotb.test()
async def checked(dut):
    """The checked engine (testbenches/checked.py): stimulus and the golden model's expected outputs in
    memories of the wrapper, every output compared in the HDL, no Python until the run is over."""
    from testbenches import checked as engine
    spec = _stimulus()
    component = engine.checked_of(**tb.params()).block
    expected = engine.Expected({k: [tuple(b) for b in v] for k, v in spec["expected"].items()},
                               spec["limit"], spec["last_accept"], spec["counters"], spec["model_seconds"])
    from tools.bench import REPEAT
    runs = [await engine.check(dut, component, spec["beats"], expected) for _ in range(REPEAT)]
    result = min(runs, key=lambda r: r["seconds"])
    (tb.run_dir() / "bench.json").write_text(json.dumps({**result, "beats_in": len(spec["beats"])}))
