"""Packets as beats of the byte stream of ``hdl.packet`` (byte 0 in the lowest lane)."""

__all__ = ["beats_of"]


def beats_of(raw, meta, width):
    """The beats (dicts) carrying packet ``raw`` on a bus of ``width`` bytes."""
    beats = [{"data": int.from_bytes(chunk, "little"), "keep": (1 << len(chunk)) - 1, "first": 0, "last": 0,
              "meta": dict(meta)} for chunk in [raw[at:at + width] for at in range(0, len(raw), width)]]
    if beats:
        beats[0]["first"] = beats[-1]["last"] = 1
    return beats
