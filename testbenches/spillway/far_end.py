"""The far end of a switch side's spill link, played by golden models: the spill node and the link each way
(``SpillNodeModel``, ``DelayLineModel``), driving ``spill_i`` and ``spill_o.ready`` of a switch side under
test (``SpillSwitch``, or a pipeline whose stage 3 it is). Bogus frames can be put on the return link."""
import collections

import cocotb
from cocotb.triggers import RisingEdge

from models.packet import beats_of
from models.spillway.link import DelayLineModel
from models.spillway.node import SpillNodeModel
from models.spillway.params import LinkParams
from testbenches import tb

__all__ = ["FarEnd"]


class FarEnd:
    """Beyond testbench ``t``'s spill link (``spill_params``: the switch side's): the node and both links,
    ``latency`` cycles each way, back-pressure one cycle in ``1 / t.link_pause`` on each; ``inject`` queues
    a bogus frame, sent between the node's frames (``bogus`` counts them)."""

    def __init__(self, t, spill_params, latency):
        self.t, self.dut = t, t.dut
        link = LinkParams(data_bytes=spill_params.data_bytes, latency=latency)
        self.node = SpillNodeModel(spill_params.node)
        self.down, self.up = DelayLineModel(link), DelayLineModel(link)
        self.width, self.ports = spill_params.data_bytes, spill_params.ports
        self.pending, self.bogus, self.injecting = [], 0, collections.deque()
        self.dut.spill_i__valid.value = 0
        self.dut.spill_o__ready.value = 1
        cocotb.start_soon(self._run())

    def reset(self):
        """The links and the node are reset with the switch side (chosen)."""
        for part in (self.node, self.down, self.up):
            part.reset()
        self.injecting.clear()

    def inject(self, frame):
        """Queue a bogus frame for the return link; ``frame`` may be a function of the ports not asked for
        at that time (``core``: the switch side's credit-core model), returning bytes."""
        self.pending.append(frame)

    def quiet(self):
        """Nothing on the links, nothing asked of the node, no bogus frame to come."""
        return (not self.pending and not self.injecting and not any((*self.up.line, *self.down.line))
                and not any(self.node.requested))

    async def _run(self):
        """Each cycle: the node takes what the down link delivers; what the node and the switch sent
        enters the links; the next cycle's ``spill_i`` is what the up link delivers (or a bogus frame)."""
        dut, t, node_ready = self.dut, self.t, 1
        layout = t.lockstep.ports.by_name["spill_i"].layout
        while True:
            await RisingEdge(dut.clk)
            if t.in_reset():
                dut.spill_i__valid.value = 0
                continue
            sent = tb.unpack(layout, dut.spill_o__payload.value.to_unsigned()) if dut.spill_o__valid.value else None
            there = self.down.head()
            node = self.node.step({"i__valid": int(there is not None), "i__payload": there, "o__ready": node_ready})
            self.up.step({"i__valid": node["o__valid"], "i__payload": node["o__payload"], "pause": not node_ready})
            self.down.step({"i__valid": int(sent is not None), "i__payload": sent,
                            "pause": not dut.spill_o__ready.value})
            idle = not any(self.up.line) and not node["o__valid"] and self.node.index == 0
            if self.pending and idle and not self.injecting:
                frame = self.pending.pop(0)
                if callable(frame):         # a RETURN for a port with nothing asked nor askable
                    core = t.switch_model.core
                    frame = frame([q for q in range(self.ports) if not core.asked[q] and not core.unasked[q]])
                self.injecting.extend(dict(b, meta={}) for b in beats_of(frame, {}, self.width))
                self.bogus += 1
            back = self.injecting.popleft() if self.injecting else self.up.head()
            dut.spill_i__valid.value = int(back is not None)
            if back is not None:
                dut.spill_i__payload.value = tb.pack(layout, back)
            dut.spill_o__ready.value = int(t.rng.random() >= t.link_pause)
            node_ready = int(not self.injecting and t.rng.random() >= t.link_pause)
