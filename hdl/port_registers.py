"""A register on every port of a Component, for timing it out of context.

``PortRegisters(block)`` has the block's own signature; each input goes through one register on its
way in and each output through one on its way out. Placed and routed alone, the block's every path
then starts and ends at a flip-flop (a combinational path from an input to an output, or from a port
to a register, would otherwise go untimed: out of context, ports have no timing). The registers add
one cycle each way and nothing else.
"""
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["PortRegisters"]


class PortRegisters(wiring.Component):
    """Registers at every port of ``block`` (a ``wiring.Component``), which it holds as a submodule.

    Parameters
    ----------
    block : wiring.Component
        The block; ``PortRegisters`` takes its signature.
    """

    def __init__(self, block):
        if not isinstance(block, wiring.Component):
            raise TypeError(f"block must be a wiring.Component, not {block!r}")
        self.block = block
        super().__init__(block.signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = self.block
        outer = {path: value for path, _, value in self.signature.flatten(self)}
        for path, member, inner in self.block.signature.flatten(self.block):
            if member.flow == In:
                m.d.sync += inner.eq(outer[path])
            else:
                m.d.sync += outer[path].eq(inner)
        return m
