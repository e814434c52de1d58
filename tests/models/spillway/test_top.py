"""Spillway's golden models closed through the links (``SpillwayModel``), alone and cheap: random traffic
and back-pressure everywhere, links of 1 to 200 cycles."""
import pytest

from models.headers import roce_packet
from models.packet import beats_of
from models.spillway.top import SpillwayModel
from testbenches import runner
from testbenches.spillway.test_top import P3

#: The closed loop adds traffic until more packets than this made the round trip through the node.
SPILLS = 10


def flows(rng, count, ports):
    return [(f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}", rng.randrange(49152, 65536), k % ports)
            for k in range(count)]


@pytest.mark.parametrize("latency", [1, 25, 200])
def test_closed_loop(latency):
    """Conservation, every spilled packet back, no drain request lost (drain_empty 0), no node overflow,
    seqs in order, per-flow order on o."""
    p = P3.replace(latency=latency)
    rng = runner.model_rng(f"spillway_closed_loop_{latency}")
    top, sw = SpillwayModel(p), p.switch
    fl = flows(rng, 12, sw.ports)
    inq, sent = [], {}

    def add(count):
        for _ in range(count):
            n = len(sent)
            src, sport, port = flow = rng.choice(fl)
            raw = bytes(roce_packet(src=src, sport=sport, psn=n, payload=bytes(rng.choice([0, 10, 60, 140]))))
            sent[raw] = (n, flow)
            inq.extend(beats_of(raw, {"port": port}, sw.data_bytes))

    add(400)
    queues, load, partial, out = [0] * sw.ports, [0] * sw.ports, b"", []
    cycle, limit = 0, 40000 + 20 * latency
    while cycle < limit:
        if not inq and top.counters()["spilled"] <= SPILLS and len(sent) < 2000:     # until the round trip is used
            add(100)
            limit += 10000
        if cycle % 300 == 0:
            load = [sw.high + 2 if inq and rng.random() < 0.4 else 0 for _ in range(sw.ports)]
        beat = inq[0] if inq and rng.random() < 0.8 else None
        o_ready = rng.random() < 0.8
        r = top.step({"i__valid": int(beat is not None), "i__payload": beat, "o__ready": int(o_ready),
                      "qdepth": [q + x for q, x in zip(queues, load)],
                      "spill_pause": int(rng.random() >= 0.85), "node_pause": int(rng.random() >= 0.85)})
        assert max(r["node_stored"]) <= sw.capacity
        if beat is not None and r["i__ready"]:
            inq.pop(0)
        if r["o__valid"] and o_ready:
            o = r["o__payload"]
            partial += o["data"].to_bytes(sw.data_bytes, "little")[:o["keep"].bit_length()]
            if o["last"]:
                out.append(partial)
                partial = b""
                queues[o["meta"]["port"]] += 1
        if cycle % 4 == 0:
            queues = [max(0, q - 1) for q in queues]
        cycle += 1
    c = top.counters()
    assert top.switch.outstanding() == 0 and c["reinjected"] == c["spilled"] > SPILLS, c
    assert len(sent) == c["forwarded"] + c["spilled"] + c["spill_overflow"] + c["spill_oversize"] + c["malformed"]
    assert c["misordered"] == 0 and c["node_drain_empty"] == 0 and c["node_overflow"] == 0, c
    assert len(out) == len(set(out)) == c["forwarded"] + c["reinjected"] and all(raw in sent for raw in out)
    last = {}
    for raw in out:
        n, flow = sent[raw]
        assert n > last.get(flow, -1), f"flow {flow} reordered"
        last[flow] = n
