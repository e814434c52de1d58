"""Line-rate stimulus of each block for the benchmark: single-beat packets, as beat dicts.

``STIMULI`` maps the ``stimulus`` name of a registry entry to its generator.
"""
from models.headers import ina_packet, roce_packet, sdr_packet
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


def sdr_beats(component, count, rng):
    """SDR data packets (UC Write Only Imm, 16-byte payload) of random messages, offsets, generations and
    channels (no command is posted: the tracker decides each as it would at line rate)."""
    p = component.params
    return [_beat(component, sdr_packet(rng.randrange(1 << p.msg_bits), rng.randrange(1 << p.offset_bits),
                                        rng.randrange(p.generations), rng.randrange(p.channels),
                                        qp_base=p.qp_base, generations=p.generations, msg_bits=p.msg_bits,
                                        user_bits=p.user_bits, payload=bytes(16)), 0)
            for _ in range(count)]


#: stimulus name (``registry.Block.stimulus``) -> generator(component, count, rng).
STIMULI = {"roce": roce_beats, "ina": ina_beats, "mixed": mixed_beats, "sdr": sdr_beats}
