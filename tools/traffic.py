"""Line-rate stimulus of each block for the benchmark: single-beat packets, as beat dicts."""
from hdl.packet_fifo import PacketFifo
from models.headers import roce_packet


def roce_beats(component, count, rng):
    """``count`` single-beat RoCEv2 packets of random flows (ECN-capable, 60 bytes)."""
    beats = []
    for n in range(count):
        raw = bytes(roce_packet(src=f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}",
                                sport=rng.randrange(49152, 65536), qp=rng.randrange(1, 64), psn=n,
                                payload=bytes(2)))
        beats.append({"data": int.from_bytes(raw, "little"), "keep": (1 << len(raw)) - 1,
                      "first": 1, "last": 1, "meta": {"port": n % 4}})
    return beats


#: block -> Component class, benchmark parameters and stimulus generator.
BENCH_BLOCKS = {
    "packet_fifo": {"cls": PacketFifo, "params": {"data_bytes": 64, "depth": 4}, "beats": roce_beats},
}
