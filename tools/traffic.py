"""Line-rate stimulus of each block for the benchmark, the soak and the mutants: single-beat packets, as
beat dicts.

``STIMULI`` maps the ``stimulus`` name of a registry entry to its generator ``(component, count, rng)``,
which reads only the Component's parameters (``component.params``) and its ``i`` port.
"""
import struct

from models import wire
from models.headers import (
    dblp_packet,
    drain_request,
    ina_packet,
    mrc_packet,
    roce_packet,
    sdr_packet,
    spill_frame,
    usid_address,
)
from models.packet import beats_of
from models.wire import DBLP_LAST, DBLP_OFFSET, DBLP_STRUCT, DBLP_VERSION


def _width(component):
    """Bytes per beat of the Component's packet input ``i``."""
    layout = component.signature.members["i"].signature.members["payload"].shape
    return dict(layout)["keep"].width


def _ports(component, default=4):
    """The egress ports of a Component's parameters (``ports``, its own or a part's); ``default`` for a
    block that has none (a spill link carries frames of any port)."""
    return next((v for k, v in component.params.flat().items() if k.rsplit(".", 1)[-1] == "ports"), default)


def _beat(component, packet, port):
    beat, = beats_of(bytes(packet), {"port": port}, _width(component))
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
    agg = getattr(component.params, "agg", component.params)      # a pipeline's stage 1, or the aggregator
    W, V, P = agg.workers, agg.values, agg.slots
    switchml = agg.policy == "switchml"
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
    ina = ina_beats(component, count // 2, rng)
    return [beat for pair in zip(roce, ina) for beat in pair] + roce[len(ina):]


def mrc_descriptors(component, count, rng):
    """uSID forwarder descriptors: MRC packets to random uSIDs (one per cycle; the table is empty)."""
    p, hdr = component.params, wire.MRC_HEADER_BYTES
    out = []
    for n in range(count):
        raw = bytes(mrc_packet(ev=rng.getrandbits(32) | 0xC000, psn=n, payload=bytes(64),
                               da=usid_address(p.locator, [p.my_usid, rng.randrange(1, 1 << 16)])))
        out.append({"hdr": int.from_bytes(raw[:hdr], "little"), "length": len(raw), "port": n % p.ports,
                    "data_depth": [rng.randrange(p.data_capacity) for _ in range(p.ports)],
                    "prio_depth": [0] * p.ports})
    return out


def ev_requests(component, count, rng):
    """EV selector requests: backups fill the slots, then a selection every cycle with ECN echoes."""
    p = component.params
    fill = [{"want": 0, "event": {"valid": 1, "kind": 5, "plane": n % p.planes, "ev": n}}
            for n in range(min(count, p.n_ev))]
    return fill + [{"want": 1, "event": {"valid": n % 3 == 0, "kind": 0, "slot": rng.randrange(p.n_ev),
                                         "ev": rng.randrange(p.n_ev)}} for n in range(count - len(fill))]


def evs(component, count, rng):
    """EV expander requests: random EVs (the reset configuration refuses all but 0)."""
    return [{"ev": rng.getrandbits(component.params.ev_bits)} for _ in range(count)]


def sdr_beats(component, count, rng):
    """SDR data packets (UC Write Only Imm, 16-byte payload) of random messages, offsets, generations and
    channels (no command is posted: the tracker decides each as it would at line rate)."""
    p = component.params
    return [_beat(component, sdr_packet(rng.randrange(1 << p.msg_bits), rng.randrange(1 << p.offset_bits),
                                        rng.randrange(p.generations), rng.randrange(p.channels),
                                        qp_base=p.qp_base, generations=p.generations, msg_bits=p.msg_bits,
                                        user_bits=p.user_bits, payload=bytes(16)), 0)
            for _ in range(count)]


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


def spill_frames(component, count, rng):
    """Spill-link frames for the spill node: a DATA frame (a random RoCEv2 packet of a random port) and a
    DRAIN frame asking for it back, alternating, so the node neither fills nor idles (``count`` frames: a beat
    each on the benchmark's links, more on a narrower one)."""
    frames, seq = [], 0
    while len(frames) < count:
        port = rng.randrange(_ports(component))
        inner = roce_packet(src=f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}",
                            sport=rng.randrange(49152, 65536), psn=seq, payload=bytes(2))
        frames += [spill_frame(inner, port, seq=seq), drain_request(port)]
        seq = (seq + 1) & 0xFFFF
    return [beat for frame in frames[:count] for beat in beats_of(bytes(frame), {"port": 0}, _width(component))]


#: stimulus name (``registry.Block.stimulus``) -> generator(component, count, rng).
STIMULI = {"roce": roce_beats, "ina": ina_beats, "mixed": mixed_beats, "mrc": mrc_descriptors,
           "ev_requests": ev_requests, "evs": evs, "sdr": sdr_beats, "dblp": dblp_beats,
           "spill": spill_frames}
