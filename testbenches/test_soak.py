"""Soak: 1e5 seeded random packets per block, every output checked against the golden model.

Each block runs its line-rate traffic (the block's ``stimulus`` in tools/traffic.py, benchmark
parameters) through the checked engine (testbenches/checked.py) as one run cut into batches of at
most ``checked.BATCH`` beats: the block and its model keep their state from batch to batch and every output
beat (with its cycle, for the cycle-accurate models), the cycle of the last input of each batch and
the counters are compared. The traffic is a seeded pool of ``POOL`` packets drawn once (scapy builds
a few hundred packets a second, the simulation takes ~10^5 a second) and sent round after round, so
the same packets meet a block in ever new states. The blocks with a configuration or command stream
(a ``traffic`` in the registry: the progress file, the uSID forwarder, the EV expander, the chunk
bitmap; and the aggregator, whose rounds would otherwise all complete in order) run configured
instead: their traffic carries the commands that set them up and change them
(sent on the block's ``cfg``/``cmd`` stream, applied to the model in the same place) and packets that
fit, and the run must end with every counter of the registry's ``reached`` above 0 (reached by
construction, some after a number of packets). ``INNET_SOAK=k`` runs k x 1e5
packets (``INNET_SOAK=100 ... -m soak`` is the 1e7 nightly run)."""
import os
import random

import cocotb
import pytest

from registry import BLOCKS, block
from testbenches import checked, runner, tb
from tools.traffic import STIMULI

#: Packets per block in a default run (``INNET_SOAK`` multiplies it).
PACKETS = 100_000
#: Distinct packets of the traffic.
POOL = 500


def packets():
    """Packets per block of this run: ``PACKETS`` x ``INNET_SOAK`` (default 1)."""
    text = os.environ.get("INNET_SOAK", "1")
    try:
        scale = float(text)
    except ValueError:
        raise ValueError(f"INNET_SOAK={text!r}: not a number") from None
    if scale <= 0:
        raise ValueError(f"INNET_SOAK={text!r}: must be > 0")
    return max(1, int(PACKETS * scale))


def traffic(stimulus, component, rng):
    """``generate(count)``: the next ``count`` packets (beat dicts) of the ``stimulus`` pool, round after round."""
    pool = STIMULI[stimulus](component, POOL, rng)
    items, packet = [], []
    for beat in pool:                            # whole packets (a beat without ``last`` is one)
        packet.append(beat)
        if beat.get("last", True):
            items.append(packet)
            packet = []
    where = [0]

    def generate(count):
        out = []
        for _ in range(count):
            out += items[where[0] % len(items)]
            where[0] += 1
        return out
    return generate


@cocotb.test()
async def soak(dut):
    """``packets()`` packets of the block's traffic in one checked run (the seed picks the pool)."""
    spec = tb.params()
    b = block(spec["block"])
    params = b.make_params(spec["params"])
    component = checked.checked_of(**spec).block
    name = f"{b.name} ({type(component).__name__})"
    count = packets()
    cocotb.log.info("soak %s: %d packets, batches of <= %d beats, seed %d", name, count, checked.BATCH, tb.seed())
    rng = random.Random(tb.seed())
    generate = b.traffic(component, rng) if b.traffic else traffic(b.stimulus, component, rng)
    totals = await checked.soak(dut, b.name, component, params, generate, count,
                                checked.BATCH, checked.EXPECTED, rng=rng, log=cocotb.log.info)
    assert totals["packets_in"] == count, totals
    cocotb.log.info("soak %s: %s", name, totals)
    missed = [c for c in b.must_reach(count) if not totals["counters"].get(c)]
    assert not missed, f"soak {name}: the configured traffic never reached {missed}: {totals['counters']}"
    tb.summary(soak=totals)


@pytest.mark.soak
@runner.parametrize(__name__, {name: checked.soak_params(name) for name in BLOCKS})
def test_soak(params, testcase, record_property):
    record_property("innet", runner.run(checked.checked_of, params, __name__, testcase, block="checked"))


@pytest.mark.soak
def test_end_state_after_the_last_edge(record_property):
    """A batch's end state (a plain output: the switch side's ``outstanding``) is compared as the frozen block
    shows it, after the batch's last edge: with traffic seed 319306743 the Spillway soak's last batch ends on an
    edge that changes ``outstanding`` (the model's value from the cycle before failed it: 57 against 58)."""
    record_property("innet", runner.run(checked.checked_of, checked.soak_params("spillway.top"), __name__, "soak",
                                        block="checked", seed=319306743))


def test_soak_length(monkeypatch):
    """``INNET_SOAK`` scales the soak (100: the 1e7 nightly run) and a bad value is refused by name;
    batches end with whole packets."""
    for text, count in (("1", PACKETS), ("100", 100 * PACKETS), ("0.5", PACKETS // 2)):
        monkeypatch.setenv("INNET_SOAK", text)
        assert packets() == count
    for text in ("x", "0", "-2"):
        monkeypatch.setenv("INNET_SOAK", text)
        with pytest.raises(ValueError, match="INNET_SOAK"):
            packets()
    beats = [{"last": n % 3 == 2} for n in range(10)]          # packets of 3 beats, the last one cut
    assert [len(b) for b in checked.batches(beats, 7)] == [6, 4]
    assert [len(b) for b in checked.batches([{"ev": n} for n in range(10)], 4)] == [4, 4, 2]
    with pytest.raises(ValueError, match="longer than the batch"):
        checked.batches(beats, 2)
    cmd = {"cmd": {"op": 1}}                                    # commands ride between packets
    items = [cmd, {"last": 0}, {"last": 1}, cmd, cmd, {"last": 1}, {"last": 0}, {"last": 1}]
    assert [len(b) for b in checked.batches(items, 6)] == [6, 2]
    assert checked.split_commands(items) == ([b for b in items if "cmd" not in b], [(0, {"op": 1}), (2, {"op": 1}),
                                                                           (2, {"op": 1})])


@pytest.mark.parametrize("name", [name for name, b in BLOCKS.items() if b.traffic])
def test_configured_by_construction(name):
    """The configured traffic reaches every counter of ``Block.reached`` in its opening (ageing: in its
    first phase) whatever the seed: the golden model, through the soak's own runner, on the fewest
    packets it asks for, under three seeds."""
    b = block(name)
    params = b.make_params(checked.soak_params(name)["params"])
    component = b.interface(params)
    need = max([*b.reached.values(), 16])
    for seed in (1, 2, 3):
        rng = random.Random(seed)
        run = checked.session(name, component, params, rng)
        for chunk in checked.batches(b.traffic(component, rng)(need), checked.BATCH):
            counters = run(chunk, final=False).counters
        missed = [c for c in b.must_reach(need) if not counters.get(c)]
        assert not missed, f"{name}, seed {seed}: {need} packets never reach {missed}: {counters}"
