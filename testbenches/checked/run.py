"""The checked engine's cocotb side: write a run's memories, run the wrapper, read the first mismatch; a long
run in batches (``soak``)."""
import inspect
import os
import time
from pathlib import Path

from amaranth.lib import data

from testbenches.checked.expected import TAIL, session
from testbenches.checked.wrapper import (
    CHECKS,
    NO_CYCLE,
    SIDE,
    Checked,
    bits,
    command_port,
    side_bits,
    state_bits,
    stream_ports,
)
from testbenches.layouts import pack, unpack

__all__ = ["write_files", "controls", "outputs_of", "verdict", "check", "soak", "soak_params", "batches", "BATCH",
           "EXPECTED", "checked_of"]


def checked_of(block, params, depth, exp_depth):
    """The ``Checked`` wrapper of registered ``block`` with ``params`` (a parameters dict, as
    ``Params.as_dict`` gives it; for ``runner.run``, which builds it from these keywords)."""
    import registry
    b = registry.block(block)
    return Checked(b.build(b.make_params(params)), depth, exp_depth)


checked_of.VERILATOR = Checked.VERILATOR
checked_of.SOURCES = (inspect.getsourcefile(Checked),)


def write_files(component, words, expected, where="."):
    """The memory files of a run (``innet_rom``): stimulus words, each output's expected beats, the
    side memory and the commands."""
    layout, outs, _ = stream_ports(component)
    command = command_port(component)
    names = Checked.files(outs, command)
    size = (bits(layout) + 7) // 8
    Path(where, names[0]).write_bytes(b"".join(w.to_bytes(size, "big") for w in words))
    for (name, shape), file in zip(outs, names[1:]):
        width = bits(shape)
        size = (32 + 2 * width + 7) // 8
        Path(where, file).write_bytes(b"".join(
            ((mask << (32 + width)) | (value << 32) | (NO_CYCLE if cycle is None else cycle)).to_bytes(size, "big")
            for cycle, value, mask in expected.outputs[name]))
    size = (side_bits(component) + 7) // 8
    Path(where, names[len(outs) + 1]).write_bytes(b"".join(w.to_bytes(size, "big")
                                                          for w in expected.side or [0] * SIDE))
    width = state_bits(component)
    size = (32 + 2 * width + 7) // 8
    entries = [(mask << 32 + width | value << 32 | cycle) for cycle, value, mask in expected.checkpoints]
    entries += [NO_CYCLE] * (CHECKS - len(entries))     # every entry written: none left from an earlier batch
    Path(where, names[len(outs) + 2]).write_bytes(b"".join(e.to_bytes(size, "big") for e in entries))
    if command:
        size = (32 + bits(command[1]) + 7) // 8
        Path(where, names[-1]).write_bytes(b"".join(((value << 32) | after).to_bytes(size, "big")
                                                    for after, value in expected.commands) or bytes(size))


def controls(component, words, expected, tail=TAIL, cap=None, keep=False):
    """{port: value} of the ``Checked`` wrapper's run inputs for ``words`` and ``expected`` (``check``
    sets them; tools/screen_harness.cpp the same)."""
    limit = expected.limit if expected.limit is not None else (cap or 64 * (len(words) + 1000))
    values = {"keep": int(keep), "beats": len(words), "limit": limit,
              "tail": limit if expected.limit is not None else tail}
    if command_port(component):
        values["cmds"] = len(expected.commands)
    for name, _ in stream_ports(component)[1]:
        values[f"expect_{name}"] = len(expected.outputs[name])
    return values


def outputs_of(component, expected):
    """The ``Checked`` wrapper's outputs ``verdict`` reads."""
    return (["cycles", "bad", "bad_missing", "bad_cycle", "bad_port", "bad_index", "bad_value", "accepted_at"]
            + (["bad_state"] if state_bits(component) else [])
            + [f"seen_{name}" for name, _ in stream_ports(component)[1]] + [f"c_{name}" for name in expected.counters])


def verdict(component, words, expected, read):
    """Compare a finished run of the ``Checked`` wrapper (``read(port) -> int``) with ``expected``; returns
    {cycles, beats_out, packets_out}. ``AssertionError`` on the first mismatch (with its cycle), a missing
    or extra beat, an input accepted in another cycle than the model's, or a counter that differs."""
    outs = stream_ports(component)[1]
    cycles = read("cycles")
    if read("bad") and read("bad_port") == len(outs):
        _differing_state(component, expected.checkpoints[read("bad_index")], read("bad_cycle"), read("bad_state"))
    if read("bad"):
        port = read("bad_port")
        name, shape = outs[port]
        index, at = read("bad_index"), read("bad_cycle")
        beats = expected.outputs[name]
        want = beats[index] if index < len(beats) else None
        if read("bad_missing"):
            raise AssertionError(f"checked: {name} beat {index} missing at cycle {at}: the model expects "
                                 f"{unpack(shape, want[1])}")
        got = read("bad_value") & ((1 << bits(shape)) - 1)
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
        seen = read(f"seen_{name}")
        beats = expected.outputs[name]
        if seen != len(beats):
            nxt = beats[seen] if seen < len(beats) else None
            raise AssertionError(f"checked: {name}: the RTL sent {seen} beats in {cycles} cycles, the model "
                                 f"{len(beats)}" + (f"; next expected at cycle {nxt[0]}" if nxt else ""))
    if expected.last_accept is not None and words:
        got = read("accepted_at")
        assert got == expected.last_accept, \
            f"checked: the last input beat went in at cycle {got}, the model takes it at cycle {expected.last_accept}"
    counters = {n: read(f"c_{n}") for n in expected.counters}
    differ = {k: (counters[k], v) for k, v in expected.counters.items() if counters[k] != v}
    assert not differ, f"checked: counters or flags differ after {cycles} cycles (RTL, model): {differ}"
    packets = 0
    for name, shape in outs:
        fields = dict(shape) if isinstance(shape, data.StructLayout) else {}
        for _, value, _ in expected.outputs[name]:
            packets += (value >> fields["last"].offset) & 1 if "last" in fields else 1
    return {"cycles": cycles, "beats_out": sum(len(v) for v in expected.outputs.values()), "packets_out": packets}


def _differing_state(component, checkpoint, at, state):
    """``AssertionError`` naming the other outputs whose compared bits differ from ``checkpoint`` at cycle ``at``."""
    _, value, mask = checkpoint
    differ, offset = {}, 0
    for name, shape in stream_ports(component)[2]:
        field = (1 << bits(shape)) - 1
        rtl, model, compared = (state >> offset) & field, (value >> offset) & field, (mask >> offset) & field
        if (rtl ^ model) & compared:
            differ[name] = (unpack(shape, rtl), unpack(shape, model))
        offset += bits(shape)
    raise AssertionError(f"checked: cycle {at}: outputs differ from the golden model (RTL, model): {differ}")


async def check(dut, component, words, expected, tail=TAIL, cap=None, keep=False):
    """Run ``words`` (packed input beats) through the ``Checked`` wrapper ``dut`` of ``component`` and
    compare with ``expected`` (``verdict``: ``AssertionError`` on the first difference); returns {cycles,
    seconds, load_seconds, beats_out, packets_out, model_seconds}. ``keep``: the block goes on from the
    state the last run left (a batch of a longer run)."""
    from cocotb.triggers import RisingEdge, Timer

    start = time.perf_counter()
    write_files(component, words, expected, os.getcwd())
    dut.start.value = 0
    dut.reset.value = 1
    for name, value in controls(component, words, expected, tail, cap, keep).items():
        getattr(dut, name).value = value
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
    result = verdict(component, words, expected, lambda name: int(getattr(dut, name).value))
    return {**result, "seconds": seconds, "load_seconds": loaded - start, "model_seconds": expected.model_seconds}



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
    layout = stream_ports(component)[0]
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
