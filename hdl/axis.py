"""AXI4-Stream boundary of a block, named as verilog-ethernet names it, for designs and testbenches
(cocotbext-axi's ``AxiStreamSource``/``AxiStreamSink``) that speak AXI4-Stream.

``AxiStream(block)`` wraps a block and turns each of its stream ports into AXI4-Stream signals:

- a packet stream (payload ``data``, ``keep``, ``first``, ``last``, ``meta``; ``hdl/packet.py``)
  becomes ``tdata``, ``tkeep``, ``tvalid``, ``tready``, ``tlast`` and ``tuser``. ``tdata`` byte ``i``
  is packet byte ``i`` of the beat (the lowest lane first, as in the block), ``tkeep`` is ``keep``,
  ``tuser`` carries ``meta`` with its fields at the bit offsets of the block's meta layout
  (``meta_fields(block)`` lists them; the default ``Meta`` is ``tuser[7:0]`` = egress port; a zero-width
  meta has no ``tuser``). ``tuser`` must hold its value on every beat of a packet (the block reads meta
  on every beat). ``first`` is not an AXI signal: on an input the wrapper raises it on the first beat
  after reset and after every beat with ``tlast``; on an output it is dropped;
- any other stream (descriptors, commands, configuration) becomes ``tdata`` (the payload's bits at
  its layout's field offsets, zero-padded to whole bytes), ``tvalid`` and ``tready``, no ``tlast``;
- the other ports (counters, status, watermarks) keep their names and widths.

Names: the block's packet input ``i`` is ``s_axis_*`` and its packet output ``o`` is ``m_axis_*``
(verilog-ethernet's single-stream convention); every other stream ``x`` is ``s_x_axis_*`` (input)
or ``m_x_axis_*`` (output). An AXI input's ``tready`` is the block's ``ready`` (always 1 for a stream
without ``ready``), so back-pressure and transfers are exactly the block's.
"""
from amaranth.hdl import Module, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiStream", "axis_ports", "is_packet", "meta_fields"]

PACKET_FIELDS = {"data", "keep", "first", "last", "meta"}


def _stream(member):
    return member.is_signature and {"valid", "payload"} <= set(member.signature.members)


def is_packet(member):
    """Whether a signature member is a packet stream (``hdl/packet.py``)."""
    if not _stream(member):
        return False
    shape = member.signature.members["payload"].shape
    return isinstance(shape, data.StructLayout) and set(dict(shape.members)) == PACKET_FIELDS


def axis_ports(block):
    """``{port: prefix}`` of the block's stream ports: ``s_axis``/``m_axis`` for the packet ``i``/``o``,
    ``s_<port>_axis``/``m_<port>_axis`` for the others."""
    out = {}
    for name, member in block.signature.members.items():
        if not _stream(member):
            continue
        direction = "s" if member.flow == In else "m"
        single = is_packet(member) and name == ("i" if direction == "s" else "o")
        out[name] = f"{direction}_axis" if single else f"{direction}_{name}_axis"
    return out


def meta_fields(block, port="i"):
    """``[(field, low bit, width)]`` of ``tuser`` for packet port ``port`` (nested fields dotted)."""
    layout = block.signature.members[port].signature.members["payload"].shape
    meta = dict(layout.members)["meta"]

    def walk(shape, prefix, base):
        for name, field in shape:
            if isinstance(field.shape, data.StructLayout):
                yield from walk(field.shape, f"{prefix}{name}.", base + field.offset)
            else:
                yield (f"{prefix}{name}", base + field.offset, field.width)

    return list(walk(data.Layout.cast(meta), "", 0)) if data.Layout.cast(meta).size else []


class AxiStream(wiring.Component):
    """``block`` behind AXI4-Stream ports (module docstring); ``block`` is its submodule ``block``."""

    def __init__(self, block):
        self.block = block
        members = {}
        for name, member in block.signature.members.items():
            prefix = axis_ports(block).get(name)
            flow = member.flow
            if prefix is None:
                members[name] = flow(Value.cast(getattr(block, name)).shape()) if member.is_port else member
                continue
            sig = member.signature.members
            payload = sig["payload"].shape
            ctrl_in, ctrl_out = (In, Out) if flow == In else (Out, In)
            members[f"{prefix}_tvalid"] = ctrl_in(1)
            members[f"{prefix}_tready"] = ctrl_out(1)
            if is_packet(member):
                fields = dict(payload.members)
                members[f"{prefix}_tdata"] = ctrl_in(data.Layout.cast(fields["data"]).size
                                                     if not isinstance(fields["data"], int) else fields["data"])
                members[f"{prefix}_tkeep"] = ctrl_in(fields["keep"])
                members[f"{prefix}_tlast"] = ctrl_in(1)
                meta = data.Layout.cast(fields["meta"]).size
                if meta:
                    members[f"{prefix}_tuser"] = ctrl_in(meta)
            else:
                size = data.Layout.cast(payload).size if not isinstance(payload, int) else payload
                members[f"{prefix}_tdata"] = ctrl_in(-(-size // 8) * 8)    # whole bytes, zero padded
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        for name, member in block.signature.members.items():
            port = getattr(block, name)
            prefix = axis_ports(block).get(name)
            if prefix is None:
                if member.flow == In:
                    m.d.comb += Value.cast(port).eq(getattr(self, name))
                else:
                    m.d.comb += getattr(self, name).eq(Value.cast(port))
                continue
            ready = getattr(port, "ready", None)
            axi = {field: getattr(self, f"{prefix}_{field}") for field in
                   ("tvalid", "tready", "tdata", "tkeep", "tlast", "tuser") if hasattr(self, f"{prefix}_{field}")}
            if member.flow == In:
                m.d.comb += port.valid.eq(axi["tvalid"])
                m.d.comb += axi["tready"].eq(ready if ready is not None else 1)
                if is_packet(member):
                    inside = Signal()       # a packet's first beat has been taken, its last not yet
                    with m.If(axi["tvalid"] & axi["tready"]):
                        m.d.sync += inside.eq(~axi["tlast"])
                    m.d.comb += [port.payload.data.eq(axi["tdata"]), port.payload.keep.eq(axi["tkeep"]),
                                 port.payload.last.eq(axi["tlast"]), port.payload.first.eq(~inside)]
                    if "tuser" in axi:
                        m.d.comb += Value.cast(port.payload.meta).eq(axi["tuser"])
                else:
                    payload = Value.cast(port.payload)
                    m.d.comb += payload.eq(axi["tdata"][:len(payload)])
            else:
                m.d.comb += axi["tvalid"].eq(port.valid)
                if ready is not None:
                    m.d.comb += ready.eq(axi["tready"])
                if is_packet(member):
                    m.d.comb += [axi["tdata"].eq(port.payload.data), axi["tkeep"].eq(port.payload.keep),
                                 axi["tlast"].eq(port.payload.last)]
                    if "tuser" in axi:
                        m.d.comb += axi["tuser"].eq(Value.cast(port.payload.meta))
                else:
                    m.d.comb += axi["tdata"].eq(Value.cast(port.payload))
        return m
