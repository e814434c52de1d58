"""Line-rate stimulus of each block for the benchmark: single-beat packets, as beat dicts.

``STIMULI`` maps the ``stimulus`` name of a registry entry to its generator.
"""
import struct

from models.headers import dblp_packet, ina_packet, roce_packet
from models.packet import beats_of
from models.wire import DBLP_LAST, DBLP_OFFSET, DBLP_STRUCT, DBLP_VERSION


def _beat(component, packet, port):
    beat, = beats_of(bytes(packet), {"port": port}, component.data_bytes)
    return beat


def roce_beats(component, count, rng):
    """``count`` single-beat RoCEv2 packets of random flows (ECN-capable, 60 bytes)."""
    return [_beat(component, roce_packet(src=f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}",
                                         sport=rng.randrange(49152, 65536), qp=rng.randrange(1, 64),
                                         psn=n, payload=bytes(2)), n % 4)
            for n in range(count)]


def ina_beats(component, count, rng):
    """Workers' contributions to rounds of 2 jobs, each round completing (fan-in = workers)."""
    W, V, P = component.workers, component.values, component.slots
    beats = []
    for n in range(count):
        round_, worker = divmod(n, W)
        beats.append(_beat(component, ina_packet(worker=worker, jobseq=round_, index=round_ % P, fanin=W,
                                                 values=[rng.randrange(-1000, 1000) for _ in range(V)]), 0))
    return beats


def mixed_beats(component, count, rng):
    """Pipeline traffic: RoCEv2 packets and INA contributions, alternating."""
    roce = roce_beats(component, count - count // 2, rng)
    ina = ina_beats(component.agg, count // 2, rng)
    return [beat for pair in zip(roce, ina) for beat in pair] + roce[len(ina):]


def dblp_beats(component, count, rng):
    """Complete DBLP rounds of 8 one-beat packets (8-byte payload), round r in slot r mod rounds: each
    closes FULL on its last packet."""
    template = bytes(dblp_packet(payload=bytes(8), rng=rng))
    beats = []
    for n in range(count):
        rnd, idx = divmod(n, 8)
        raw = bytearray(template)
        struct.pack_into(DBLP_STRUCT, raw, DBLP_OFFSET, DBLP_VERSION << 4 | (DBLP_LAST if idx == 7 else 0), 0,
                         rnd & 3, rnd & 0xFFFF, idx, 8, 0)
        beats.append(_beat(component, bytes(raw), 0))
    return beats


#: stimulus name (``registry.Block.stimulus``) -> generator(component, count, rng).
STIMULI = {"roce": roce_beats, "ina": ina_beats, "mixed": mixed_beats, "dblp": dblp_beats}
