"""Packets as beats of the byte stream of ``hdl.packet`` (byte 0 in the lowest lane)."""

__all__ = ["beats_of"]


def beats_of(raw, meta, width):
    """The beats (dicts) carrying packet ``raw`` on a bus of ``width`` bytes."""
    chunks = [raw[i:i + width] for i in range(0, len(raw), width)]
    return [{"data": int.from_bytes(c, "little"), "keep": (1 << len(c)) - 1, "first": int(n == 0),
             "last": int(n == len(chunks) - 1), "meta": dict(meta)} for n, c in enumerate(chunks)]
