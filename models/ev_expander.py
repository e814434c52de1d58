"""Golden model of the MRC EV expander (SPEC section 5): a 32-bit entropy value -> outer SRv6 DA.

OCP MRC field expansion. The DA is a 32-bit locator followed by ``usids`` 16-bit uSID fields (the
rest of the 128 bits are 0, the end of carrier). Each field has a configured ``(init, mask)``:
the field takes the next popcount(mask) EV bits, MSB-first (the locator takes EV[31:...] first),
and spreads them over the mask's set bits, the first bit taken on the mask's most significant set
bit; they overwrite ``init`` under the mask. A full mask copies EV bits ("explicit"), a partial or
non-contiguous mask mixes EV bits into a fixed pattern ("generated", "odd"), a zero mask is a fixed
field (the locator, usually).

*Chosen* rules (the RTL follows them):
- Configuration is a table of ``1 + usids`` registers ``(init, mask)`` written by ``configure``
  (a control-plane write between requests, never mid-request); a configuration whose masks take
  more than ``ev_bits`` bits, or whose init/mask does not fit its field, is refused
  (``ValueError``; the RTL's config port is written by software that checks the same).
  ``reset`` clears every field to ``(0, 0)``: all fields fixed at 0, zero EV bits used.
- The EV bits no field takes (the low ``ev_bits - total`` bits) must be zero; a request whose
  unused bits are not zero is rejected: no DA, counter ``bad_ev``.
- Interface: ``process(ev)`` per request; the RTL accepts one EV per cycle and answers in order
  after a fixed latency, so the testbench compares every answer (``{"ok", "da"}``).
- Counters: ``expanded`` + ``bad_ev`` = requests; they saturate at ``2**counter_bits - 1``.
"""
from dataclasses import dataclass

from models import wire
from models.params import Params, check, param

__all__ = ["EvExpanderParams", "EvExpanderModel", "COUNTERS", "pdep", "pext", "expand", "contract",
           "field_widths"]

#: Per-request counters; requests = expanded + bad_ev.
COUNTERS = ("expanded", "bad_ev")


@dataclass(frozen=True, kw_only=True)
class EvExpanderParams(Params):
    """Parameters of ``EvExpander`` and its model."""
    usids: int = param(3, lo=1, hi=wire.USIDS_PER_DA, doc="16-bit uSID fields after the 32-bit locator")
    ev_bits: int = param(wire.EV_BITS, lo=1, hi=wire.EV_BITS, doc="EV width")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width (counters saturate)")


def field_widths(usids):
    """Widths of the DA fields: the locator, then ``usids`` uSIDs."""
    return [wire.USID_LOCATOR_BITS] + [wire.USID_BITS] * usids


def pdep(bits, mask):
    """Oracle (x86 PDEP): the low popcount(mask) bits of ``bits`` onto the set bits of ``mask``,
    bit 0 on the lowest set bit (so the most significant taken bit lands on the highest)."""
    out, i = 0, 0
    for b in range(mask.bit_length()):
        if mask >> b & 1:
            out |= (bits >> i & 1) << b
            i += 1
    return out


def pext(value, mask):
    """Oracle (x86 PEXT): the bits of ``value`` under ``mask``, packed from bit 0; inverse of pdep."""
    out, i = 0, 0
    for b in range(mask.bit_length()):
        if mask >> b & 1:
            out |= (value >> b & 1) << i
            i += 1
    return out


def expand(ev, fields, ev_bits=wire.EV_BITS):
    """Oracle: the 128-bit DA of ``ev`` under ``fields`` [(init, mask), ...], or None if EV bits
    no field takes are set. Written with pdep on the MSB-aligned EV string, unlike the model."""
    text = format(ev, f"0{ev_bits}b")
    total = sum(bin(m).count("1") for _, m in fields)
    if "1" in text[total:]:
        return None
    da, used, shift = 0, 0, 128
    for (init, mask), width in zip(fields, field_widths(len(fields) - 1)):
        k = bin(mask).count("1")
        bits = int(text[used:used + k] or "0", 2)
        used += k
        shift -= width
        da |= ((init & ~mask) | pdep(bits, mask)) << shift
    return da


def contract(da, fields, ev_bits=wire.EV_BITS):
    """Oracle, inverse of ``expand``: the EV that gives ``da`` (the NIC or a scenario reading a path)."""
    ev, used, shift = 0, 0, 128
    for (_, mask), width in zip(fields, field_widths(len(fields) - 1)):
        shift -= width
        k = bin(mask).count("1")
        used += k
        ev |= pext(da >> shift & ((1 << width) - 1), mask) << (ev_bits - used)
    return ev


class EvExpanderModel:
    """Takes the ``EvExpanderParams`` of ``EvExpander``; ``process(ev)`` is one request."""

    def __init__(self, params=None):
        self.params = check(params, EvExpanderParams)
        self.widths = field_widths(self.params.usids)
        self.reset()

    def reset(self):
        self.fields = [(0, 0)] * len(self.widths)
        self.counters = dict.fromkeys(COUNTERS, 0)

    def configure(self, fields):
        """Write the ``(init, mask)`` registers: the locator's, then each uSID's."""
        fields = [tuple(f) for f in fields]
        if len(fields) != len(self.widths):
            raise ValueError(f"fields: expected {len(self.widths)} (init, mask) pairs, got {len(fields)}")
        for i, ((init, mask), width) in enumerate(zip(fields, self.widths)):
            for name, v in (("init", init), ("mask", mask)):
                if not isinstance(v, int) or not 0 <= v < 1 << width:
                    raise ValueError(f"fields[{i}].{name} = {v!r}: must be a {width}-bit value")
        total = sum(bin(m).count("1") for _, m in fields)
        if total > self.params.ev_bits:
            raise ValueError(f"fields: masks take {total} EV bits, more than ev_bits = {self.params.ev_bits}")
        self.fields = fields

    def _count(self, name):
        self.counters[name] = min(self.counters[name] + 1, (1 << self.params.counter_bits) - 1)

    def process(self, ev):
        """``{"ok": bool, "da": 128-bit int or None}`` for one EV request."""
        if not 0 <= ev < 1 << self.params.ev_bits:
            raise ValueError(f"ev = {ev!r}: must be an ev_bits = {self.params.ev_bits} bit value")
        pos, da, shift = self.params.ev_bits, 0, 128
        for (init, mask), width in zip(self.fields, self.widths):
            shift -= width
            value = init
            for b in reversed(range(width)):          # the mask's set bits, most significant first
                if mask >> b & 1:
                    pos -= 1
                    value = (value & ~(1 << b)) | ((ev >> pos & 1) << b)
            da |= value << shift
        if ev & ((1 << pos) - 1):
            self._count("bad_ev")
            return {"ok": False, "da": None}
        self._count("expanded")
        return {"ok": True, "da": da}
