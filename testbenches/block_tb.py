"""The block testbench base: the Component and its golden model in lockstep, drivers, reset, counters,
conservation and pcaps; ``follow`` runs a lockstep beside any scope of the simulation."""
import cocotb
from cocotb.triggers import ReadWrite, RisingEdge

import registry
from models.contract import Packet
from testbenches.context import params, reset, start_clock, summary, write_pcap
from testbenches.lockstep import Lockstep
from testbenches.streams import PacketSink, PacketSource, StreamSink, StreamSource

__all__ = ["BlockTB", "PortValues", "follow"]


class PortValues(dict):
    """The integer value of each port in the cycle that just ended, read from the simulator when first
    asked for (a port the model does not name this cycle is never read)."""

    def __init__(self, handles):
        super().__init__()
        self.handles = handles

    def __missing__(self, name):
        value = self[name] = int(self.handles[name].value)
        return value


async def follow(scope, lockstep, clk, in_reset, packets=None, before=None, after=None):
    """Run ``lockstep`` beside the Component whose ports are the handles of ``scope`` (the DUT, or a
    wrapper's submodule such as ``AxiStream``'s ``dut.block``): from the first cycle after a reset,
    every rising edge of ``clk`` compares the cycle that just ended (``in_reset()``: nothing compared,
    the model reset once it ends). ``packets(port)``: the whole packet of a first beat (a model's
    ``LOOKAHEAD``); ``before(values)`` / ``after(values)``: called around the model's step."""
    handles = {name: getattr(scope, name) for name in lockstep.ports.names()}
    after_reset = False
    while True:
        await RisingEdge(clk)
        if in_reset():
            after_reset = True
            continue
        if after_reset:
            lockstep.reset()
            after_reset = False
        values = PortValues(handles)
        if before:
            before(values)
        lockstep.cycle(values, packets, where=f"cycle {lockstep.cycles}")
        if after:
            after(values)


class BlockTB:
    """Base of a block's testbench: clock, reset, the golden model in lockstep, drivers, counters,
    conservation, pcaps.

    A subclass sets ``name`` (the block's registry name) and creates the drivers it needs with
    ``packet_source``, ``stream_source``, ``packet_sink`` and ``stream_sink`` (each takes the port's own
    layout from the Component). ``params`` is the run's parameters object, ``block`` the Component built
    from it, ``model`` the block's golden model (the registry's, or the one given) and ``lockstep`` the
    two side by side (``testbenches/lockstep.py``): from the first cycle after a reset, every cycle of
    the RTL is compared with the model (a cycle model: every port it names; a transaction model: every
    output transfer). ``sample(values)`` is called each cycle before the model's step, with the ports'
    values (``PortValues``), and ``sampled(values)`` after it: a testbench's functional coverage and
    bookkeeping (what a cycle met, what it decided). A testbench that reads the model's state to choose
    its next stimulus waits with ``edge()``. While ``resetting`` is true nothing is compared; ``cycle``
    counts the compared cycles since the last reset.
    """

    name = None
    period_ns = 2

    def __init__(self, dut, model=None):
        self.dut = dut
        self.params = params()
        entry = registry.block(self.name)
        self.block = entry.interface(self.params)
        self.model = model if model is not None else entry.model(self.params)
        self.lockstep = Lockstep(self.block, self.model)
        self.resetting = False
        self.muted = False          # outputs are discarded while a reset lands mid-traffic
        self.source = self.sink = None
        self.drivers = {}
        start_clock(dut, self.period_ns)
        cocotb.start_soon(follow(dut, self.lockstep, dut.clk, self.in_reset, self._lookahead, self.sample,
                                 self.sampled))

    @property
    def cycle(self):
        return self.lockstep.cycles

    def _layout(self, port):
        return self.lockstep.ports.by_name[port].layout

    def _driver(self, kind, port):
        driver = self.drivers[port] = kind(self.dut, port, self._layout(port))
        return driver

    def packet_source(self, port="i"):
        return self._driver(PacketSource, port)

    def stream_source(self, port):
        return self._driver(StreamSource, port)

    def packet_sink(self, port="o"):
        return self._driver(PacketSink, port)

    def stream_sink(self, port):
        return self._driver(StreamSink, port)

    def _lookahead(self, port):
        """The whole packet whose first beat is on ``port`` now (a model's ``LOOKAHEAD``)."""
        raw, meta = self.drivers[port].packets[0]
        return Packet(raw, meta)

    def sample(self, values):
        """Functional coverage of one cycle, before the model's step (a testbench may override it)."""

    def sampled(self, values):
        """The same cycle after the model's step (a testbench may override it): what the model decided
        in it (its state after the edge, its counters)."""

    async def edge(self):
        """The next rising edge, once the lockstep has stepped the model on it (the tasks one edge wakes
        run in the order they began waiting: a testbench's own ``RisingEdge`` may come first)."""
        await RisingEdge(self.dut.clk)
        await ReadWrite()

    def in_reset(self):
        """True while ``reset`` runs or the DUT's ``rst`` is high."""
        return self.resetting or bool(self.dut.rst.value)

    async def reset(self, cycles=3):
        """Hold ``rst`` for ``cycles`` edges; the drivers drop their queued and partial packets, the
        model starts again."""
        self.resetting = True
        await reset(self.dut, cycles)
        self.lockstep.reset()
        self.resetting = False

    async def reset_mid_traffic(self, landing, cycles=2):
        """Reset once the source has sent ``landing`` beats with more still queued: outputs seen
        meanwhile are discarded (``muted``), the sink is cleared, the model starts again; afterwards
        every counter reads 0."""
        while self.source.sent < landing:
            await RisingEdge(self.dut.clk)
        assert self.source.queue, "the reset lands mid-traffic"
        self.muted = True
        await self.reset(cycles)
        self.sink.clear()
        self.muted = False
        assert not any(self.counters().values()), f"counters cleared by reset: {self.counters()}"

    def counters(self):
        """The DUT's counter ports (those the model counts), by name."""
        return {name: int(getattr(self.dut, name).value) for name in self.model.counters()}

    def check_counters(self, expected=None):
        """The DUT's counters equal ``expected`` (default: the model's); recorded in the summary; returned."""
        got, expected = self.counters(), dict(self.model.counters() if expected is None else expected)
        if got != expected:
            differ = {k: (got.get(k), expected.get(k)) for k in {**got, **expected} if got.get(k) != expected.get(k)}
            raise AssertionError(f"counters: RTL {got}, model {expected}; differing (RTL, model): {differ}")
        summary(counters=got)
        return got

    def check_done(self):
        """Every output the model expects came out of the RTL (a transaction model)."""
        self.lockstep.done()

    @staticmethod
    def conserved(what, total, **parts):
        """Conservation: ``total`` equals the sum of the named ``parts``."""
        if total != sum(parts.values()):
            terms = " + ".join(f"{k} {v}" for k, v in parts.items())
            raise AssertionError(f"conservation of {what}: {total} != {terms} = {sum(parts.values())}")

    def write_pcaps(self, inputs=None, outputs=None):
        """``in.pcap`` and ``out.pcap``: by default the packets the source transferred and those the
        sink captured from the RTL, at their simulation times."""
        write_pcap("in", self.source.log if inputs is None else inputs)
        write_pcap("out", self.sink.log if outputs is None else outputs)
