"""The Amaranth header layouts equal scapy's bytes, field by field, in both directions."""
import random

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from hdl import headers
from hdl.packet import beat_layout
from models.headers import BTH, IP, UDP, Ether, roce_packet

LAYERS = [
    (headers.ETHERNET, Ether, headers.ETH_OFFSET),
    (headers.IPV4, IP, headers.IP_OFFSET),
    (headers.UDP, UDP, headers.UDP_OFFSET),
    (headers.BTH, BTH, headers.BTH_OFFSET),
]


def scapy_fields(layer):
    """Integer value of every field of a built scapy layer, by name."""
    values = {}
    for field in layer.fields_desc:
        if field.name in ("options", "icrc"):
            continue
        machine = field.i2m(layer, layer.getfieldval(field.name))
        values[field.name] = int.from_bytes(machine, "big") if isinstance(machine, bytes) else int(machine)
    return values


def random_packet(rng):
    return roce_packet(src=f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}",
                       dst=f"192.168.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                       sport=rng.randrange(1 << 16), qp=rng.randrange(1 << 24),
                       psn=rng.randrange(1 << 24), op=rng.choice([0x04, 0x00, 0x02, 0x0a]),
                       tos=rng.randrange(256), payload=rng.randbytes(rng.randrange(40)))


@pytest.mark.parametrize("layout,layer,offset", LAYERS, ids=["ethernet", "ipv4", "udp", "bth"])
def test_layout_matches_scapy(layout, layer, offset):
    """scapy bytes -> layout fields equal scapy's fields; layout const -> bytes equal scapy's."""
    rng = random.Random(1)
    for _ in range(50):
        raw = bytes(random_packet(rng))
        parsed = Ether(raw)[layer]
        expected = scapy_fields(parsed)
        size = layout.size // 8
        assert set(expected) == {name for name, _ in layout}, "layout and scapy fields differ"
        view = data.Const(layout, int.from_bytes(raw[offset:offset + size], "big"))
        for name, value in expected.items():
            assert view[name] == value, f"{layer.__name__}.{name}"
        rebuilt = layout.const(expected)
        assert rebuilt.as_value().value.to_bytes(size, "big") == raw[offset:offset + size]


def test_wire_view_on_a_beat():
    """``wire_view`` reads each header field at its offset from a little-endian packet beat."""
    from amaranth.hdl import Module, Signal
    raw = bytes(random_packet(random.Random(2)))[:64].ljust(64, b"\0")
    beat = Signal(beat_layout(64))
    m = Module()
    views = {layer.__name__: headers.wire_view(layout, beat.data, offset)
             for layout, layer, offset in LAYERS}
    probes = {f"{name}.{field}": Signal.like(views[name][field], name=f"{name}_{field}")
              for name in views for field, _ in views[name].shape()}
    for key, probe in probes.items():
        name, field = key.split(".")
        m.d.comb += probe.eq(views[name][field])
    sim = Simulator(m)
    parsed = Ether(raw)

    async def bench(ctx):
        ctx.set(beat.data, int.from_bytes(raw, "little"))
        for key, probe in probes.items():
            name, field = key.split(".")
            value = scapy_fields(parsed[{"Ether": Ether, "IP": IP, "UDP": UDP, "BTH": BTH}[name]])[field]
            assert ctx.get(probe) == value, key

    sim.add_testbench(bench)
    sim.run()


def test_spill_layout_round_trip():
    """Spill frames (DATA, RETURN, DRAIN): scapy bytes -> SPILL fields -> bytes; the inner frame is whole."""
    from models import wire
    from models.headers import Spill, drain_request, spill_frame
    rng = random.Random(3)
    size = headers.SPILL.size // 8
    assert headers.SPILL_HEADER_BYTES == wire.SPILL_OFFSET + size == 22
    for n in range(60):
        inner = bytes(random_packet(rng))
        fields = dict(port=rng.randrange(256), flow=rng.randrange(1 << 16), seq=rng.randrange(1 << 16))
        if n % 3 == 2:
            frame = drain_request(fields["port"], count=rng.randrange(1, 256))
        else:
            frame = spill_frame(inner, op=(wire.SPILL_DATA, wire.SPILL_RETURN)[n % 2], **fields)
        raw = bytes(frame)
        parsed = Ether(raw)
        assert parsed.type == wire.ETHERTYPE_SPILL and Spill in parsed
        expected = scapy_fields(parsed[Spill])
        assert set(expected) == {name for name, _ in headers.SPILL}
        view = data.Const(headers.SPILL, int.from_bytes(raw[wire.SPILL_OFFSET:wire.SPILL_OFFSET + size], "big"))
        for name, value in expected.items():
            assert view[name] == value, f"Spill.{name}"
        rebuilt = headers.SPILL.const(expected).as_value().value.to_bytes(size, "big")
        assert rebuilt == raw[wire.SPILL_OFFSET:wire.SPILL_HEADER_BYTES]
        if n % 3 == 2:
            assert len(raw) == wire.SPILL_HEADER_BYTES
        else:
            assert raw[wire.SPILL_HEADER_BYTES:] == inner
            assert bytes(parsed[Spill].payload) == inner and Ether in parsed[Spill].payload
