"""The checked engine (testbenches/checked.py) itself: a clean run passes, and every kind of difference
planted in the golden model's expectations (a payload bit, a cycle, a missing beat, an extra beat, a
counter, another output's end value or its value at a checkpoint, the cycle the last input goes in, the
gaps of the input, a command's value, place or absence) fails the run, naming the cycle where it shows."""
import random

import cocotb

from registry import block
from testbenches import checked, runner, tb
from testbenches.checked.wrapper import side_bits
from tools.traffic import roce_beats

#: The soak's wrapper of the in-switch spill buffer (one Verilator build for both).
WRAPPER = checked.soak_params("spillway.inswitch")
BEATS = 120


def setup():
    """(component, packed input beats, Expected) of seeded line-rate RoCEv2 traffic on the spill buffer."""
    component = checked.checked_of(**tb.params()).block
    beats = roce_beats(component, BEATS, random.Random(tb.seed()))
    layout = component.signature.members["i"].signature.members["payload"].shape
    params = block("spillway.inswitch").make_params(tb.params()["params"])
    expected = checked.expect("spillway.inswitch", component, params, beats)
    assert len(expected.outputs["o"]) == BEATS, "qdepth 0, ports 0..3 (roce_beats): every packet is forwarded"
    return component, [tb.pack(layout, b) for b in beats], expected


async def fails(dut, component, words, expected, *needles):
    """The checked run fails with a message holding every one of ``needles``."""
    try:
        await checked.check(dut, component, words, expected)
    except AssertionError as error:
        message = str(error)
        assert all(n in message for n in needles), f"wrong failure: {message!r}, wanted {needles}"
        cocotb.log.info("caught as expected: %s", message)
        return
    raise AssertionError(f"the planted difference {needles} went unnoticed")


@cocotb.test()
async def clean_run(dut):
    """The RTL and its golden model agree on every beat, cycle and counter."""
    component, words, expected = setup()
    result = await checked.check(dut, component, words, expected)
    assert result["beats_out"] == BEATS and result["cycles"] == expected.limit, result
    tb.summary(counters=expected.counters)


@cocotb.test()
async def planted_differences(dut):
    """Each planted difference fails the run at its cycle (one wrapper, re-run after each)."""
    component, words, expected = setup()
    beats = expected.outputs["o"]
    k = len(beats) // 2
    cycle, value, mask = beats[k]
    desc = component.descriptor
    length = dict(desc)["length"]

    beats[k] = (cycle, value ^ (1 << length.offset), mask)               # a payload bit (length)
    await fails(dut, component, words, expected, f"cycle {cycle}: o beat {k} differs", "'length'")
    beats[k] = (cycle, value ^ (1 << length.offset), mask & ~(1 << length.offset))   # masked: not compared
    await checked.check(dut, component, words, expected)
    beats[k] = (cycle + 1, value, mask)                                   # the model wants it a cycle later
    await fails(dut, component, words, expected, f"cycle {cycle}: o beat {k}", f"at cycle {cycle + 1}")
    beats[k] = (cycle, value, mask)

    extra = beats.pop()                                                   # the RTL sends one more beat
    await fails(dut, component, words, expected, f"cycle {extra[0]}: o beat {len(beats)}", "does not expect")
    beats.append(extra)
    beats.append((extra[0] + 1, value, mask))                             # one the RTL never sends
    await fails(dut, component, words, expected, f"missing at cycle {extra[0] + 1}")
    beats.pop()

    expected.last_accept += 1
    await fails(dut, component, words, expected, "last input beat went in at cycle")
    expected.last_accept -= 1
    expected.counters["forwarded"] += 1
    await fails(dut, component, words, expected, "counters or flags differ", "'forwarded'")
    expected.counters["forwarded"] -= 1
    expected.counters["pending"] += 1                                     # an output that is no counter: its end
    await fails(dut, component, words, expected, "counters or flags differ", "'pending'")
    expected.counters["pending"] -= 1
    await checked.check(dut, component, words, expected)                 # restored: passes again


@cocotb.test()
async def gaps_and_checkpoints(dut):
    """With a soak's side memory (``i`` idle one cycle in eight, its payload garbage; outputs stalled;
    ``qdepth`` walking) the run passes. The same memory without its gaps fails (the model took no beat
    in a gap), and so does a value planted in a checkpoint of the other outputs, at that checkpoint's cycle."""
    component = checked.checked_of(**tb.params()).block
    rng = random.Random(tb.seed())
    beats = roce_beats(component, BEATS, rng)
    layout = component.signature.members["i"].signature.members["payload"].shape
    words = [tb.pack(layout, b) for b in beats]
    params = block("spillway.inswitch").make_params(tb.params()["params"])
    expected = checked.session("spillway.inswitch", component, params, rng)(beats)
    gap = 1 << side_bits(component) - 1
    assert any(word & gap for word in expected.side), "the side memory has gaps"
    await checked.check(dut, component, words, expected)

    with_gaps = expected.side
    expected.side = [word & ~gap for word in with_gaps]
    await fails(dut, component, words, expected, "checked: ")
    expected.side = with_gaps

    for ones in (True, False):              # a compared bit the model has at 1, then one at 0, flipped
        k, bit = next((n, b & -b) for n, (_, value, mask) in enumerate(expected.checkpoints)
                      if n >= len(expected.checkpoints) // 2 and (b := mask & (value if ones else ~value)))
        cycle, value, mask = expected.checkpoints[k]
        expected.checkpoints[k] = (cycle, value ^ bit, mask)
        await fails(dut, component, words, expected, f"cycle {cycle}: outputs differ from the golden model")
        expected.checkpoints[k] = (cycle, value, mask)
    await checked.check(dut, component, words, expected)                 # restored: passes again


@cocotb.test()
async def commands(dut):
    """A block's command stream from the command memory (the soak's EV-expander wrapper): a run with a
    profile written before the requests and another between them passes; a changed command, one sent a
    beat later than the model applies it, and one the RTL never gets each fail the run."""
    from models import wire
    from models.ev_expander import EvExpanderParams, profile
    component = checked.checked_of(**tb.params()).block
    params = EvExpanderParams(**tb.params()["params"])
    bits = params.ev_bits
    fields = [(32, 0xFC00_0000, 0, 0, 0), (16, 0, 0, 0, 0xFFFF), (16, 0x1200, 0, 0, 0x00FF), (16, 0, 0, 0, 0)]
    first = profile(wire.EV_FMT_MODE_SRV6, [32, 16, 16, 16], fields)          # 24 EV bits taken
    second = profile(wire.EV_FMT_MODE_SRV6, [32, 16, 16, 16], fields[:2] + [(16, 0, 0, 0, 0xFFFF)] + fields[3:])
    items = [{"cmd": first}] + [{"ev": ev << (bits - 24)} for ev in range(1, 9)] + [{"ev": 1}]  # expanded x 8, bad_ev
    items += [{"cmd": second}] + [{"ev": (0x1234_5677 + ev) << (bits - 32)} for ev in range(4)]  # 32 bits taken
    layout = component.signature.members["i"].signature.members["payload"].shape
    cfg = component.signature.members["cfg"].signature.members["payload"].shape
    words = [tb.pack(layout, b) for b in items if "cmd" not in b]

    def expected():
        return checked.expect("ev_expander", component, params, items)
    clean = expected()
    assert clean.counters == {"expanded": 12, "bad_ev": 1, "configured": 2, "refused": 0}, clean.counters
    assert [after for after, _ in clean.commands] == [0, 9], clean.commands
    await checked.check(dut, component, words, clean)

    planted = expected()
    changed = dict(first, fields=[dict(f) for f in first["fields"]])
    changed["fields"][1]["mask"] = 0xFFFE                                   # a bit of field 1's mask differs
    planted.commands[0] = (0, tb.pack(cfg, changed))
    await fails(dut, component, words, planted, "o beat 0 differs")
    planted = expected()
    planted.commands[1] = (10, planted.commands[1][1])                    # one request later than the model
    await fails(dut, component, words, planted, "o beat 9 differs")
    planted = expected()
    planted.commands.pop()                                                # never sent
    await fails(dut, component, words, planted, "o beat 9 differs")
    await checked.check(dut, component, words, clean)                    # restored: passes again


@runner.parametrize(__name__, {"spillway.inswitch": WRAPPER, "ev_expander": checked.soak_params("ev_expander")},
                    select=lambda config, test: (test == "commands") == (config == "ev_expander"))
def test_checked(params, testcase, record_property):
    record_property("innet", runner.run(checked.checked_of, params, __name__, testcase, block="checked"))
