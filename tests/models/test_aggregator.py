"""The aggregator golden model alone (``models/aggregator.py``): the tests that need no RTL."""
import random

from amaranth.lib import data

from hdl import headers
from models.aggregator import INT32_MAX, INT32_MIN
from models.headers import INA, Ether, ina_packet


def scapy_fields(layer):
    return {f.name: layer.getfieldval(f.name) for f in layer.fields_desc if f.name != "values"}


def test_ina_layout_matches_scapy():
    """scapy INA bytes -> ``headers.INA`` fields and back; values are big-endian int32 after it."""
    rng = random.Random(3)
    size = headers.INA.size // 8
    assert headers.INA_OFFSET == 42 and headers.INA_HEADER_BYTES == 42 + size
    for _ in range(100):
        flags = {f: rng.randrange(2) for f in ("overflow", "resend", "collision", "ack", "evict", "result", "ecn")}
        values = [rng.randrange(INT32_MIN, INT32_MAX + 1) for _ in range(rng.randrange(1, 9))]
        pkt = ina_packet(rng.randrange(32), rng.randrange(1 << 32), rng.randrange(1 << 16), values,
                         fanin=rng.randrange(256), priority=rng.randrange(256), resv=rng.randrange(2),
                         **flags)
        raw = bytes(pkt)
        parsed = Ether(raw)[INA]
        expected = scapy_fields(parsed)
        assert set(expected) == {name for name, _ in headers.INA}
        view = data.Const(headers.INA, int.from_bytes(raw[42:42 + size], "big"))
        for name, value in expected.items():
            assert view[name] == value, name
        assert headers.INA.const(expected).as_value().value.to_bytes(size, "big") == raw[42:42 + size]
        tail = raw[headers.INA_HEADER_BYTES:]
        assert [int.from_bytes(tail[4 * i:4 * i + 4], "big", signed=True) for i in range(len(values))] \
            == parsed.values == values
