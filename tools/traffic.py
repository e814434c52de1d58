"""Line-rate stimulus of each block for the benchmark: single-beat packets, as beat dicts.

``STIMULI`` maps the ``stimulus`` name of a registry entry to its generator.
"""
from models import wire
from models.headers import ina_packet, roce_packet
from models.packet import beats_of


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
    """Workers' contributions to successive rounds, each round completing (fan-in = workers).

    Round r uses slot r mod slots and job+seq r + 1 (ATP's sequence numbers start at 1; 0 marks an
    empty slot). ATP and ESA: the PS's ACK follows each round (it frees ATP's slot). SwitchML: the
    pool index carries the set, (r div slots) mod 2, in its top bit.
    """
    W, V, P = component.workers, component.values, component.slots
    switchml = component.policy == "switchml"
    packets, round_ = [], 0
    while len(packets) < count:
        index = round_ % P | (wire.INA_SET_BIT if switchml and round_ // P % 2 else 0)
        packets += [ina_packet(worker=w, jobseq=round_ + 1, index=index, fanin=W,
                               values=[rng.randrange(-1000, 1000) for _ in range(V)]) for w in range(W)]
        if not switchml:
            packets.append(ina_packet(jobseq=round_ + 1, index=index, fanin=W, values=[0] * V, ack=1,
                                      bitmap=(1 << W) - 1))
        round_ += 1
    return [_beat(component, packet, 0) for packet in packets[:count]]


def mixed_beats(component, count, rng):
    """Pipeline traffic: RoCEv2 packets and INA contributions, alternating."""
    roce = roce_beats(component, count - count // 2, rng)
    ina = ina_beats(component.agg, count // 2, rng)
    return [beat for pair in zip(roce, ina) for beat in pair] + roce[len(ina):]


#: stimulus name (``registry.Block.stimulus``) -> generator(component, count, rng).
STIMULI = {"roce": roce_beats, "ina": ina_beats, "mixed": mixed_beats}
