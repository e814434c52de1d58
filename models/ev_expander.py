"""Golden model of the MRC EV expander (SPEC section 5): OCP MRC 1.0 EV expansion under a whole profile.

OCP's profile (``mrc_ctl.h``), expanded as ``examples/ev_expansion/ev_expansion.c`` does: a format mode,
the format field widths (``struct mrc_ctl_ev_fmt_field``) and the EV fields paired with them in order
(``struct mrc_ctl_ev_field``: width, init_val, min_val, max_val, mask). An EV is OCP's ``ev_t`` read as
a bit string from bit 7 of byte 0. Per field (``dump_expanded_ev``): the value starts as init_val; the
next popcount(mask) EV bits are deposited under the mask's set bits, the first taken on the highest
(``ev_extract_bits``, ``apply_mask_to_value``); the value goes right-aligned into a slot as wide as its
format field (zero-filled where the slot is wider, its low bits kept where narrower:
``pack_value_into_ev``); slots follow each other from bit 7 of byte 0 and format fields past the EV
fields stay zero. An EV with a bit set after the consumed bits is refused (``verify_unused_bits_zero``):
counter ``bad_ev`` and ``ok`` low (*chosen*: ``exp_ev`` is then the expansion of the consumed bits, which
OCP does not give and the user must not use; the hardware need not clear it).

A profile is refused (counter ``refused``; the block keeps the profile it had, as OCP's modify call
fails) by OCP's ``check_profs``: more EV fields than format fields; field widths summing to more than
the format's; a field wider than 32 bits; init_val or mask with a bit at or above the field width; a
non-zero mask too narrow for max_val (max_val >= 2**popcount(mask)). By ``mrc_ctl.h``'s ``ev_t`` layout: an
STEV format wider than 32 bits, an SRv6 one wider than 256. By the device's capabilities, as
``mrc_ctl.h`` lets a device refuse (E2BIG, ``ev_max_width``, ``ev_fmt_mode_mask``): a mode other than STEV
and SRv6 (UDP: ``mrc_ctl.h`` names the mode but gives ``ev_t`` no layout for it), more than ``max_fields``
fields, masks taking more than ``ev_bits`` EV bits, a format wider than ``exp_bits``, a field wider than
``field_bits``. min_val plays no part (it bounds what a NIC generates).

*Chosen* interface (the RTL's): ``process("cfg", profile)`` is one whole-profile write (``profile``'s
dict); ``process("i", {"ev": ev})`` one request, ``ev`` the first ``ev_bits`` bits of ``ev_t`` as an
integer (bit 7 of byte 0 its most significant bit; later bits of ``ev_t`` are zero), answered on ``o``
with ``{"ok", "exp_ev"}``, ``exp_ev`` the first ``exp_bits`` bits of the expanded ``ev_t`` the same way.
``reset`` installs the empty profile (no fields: only EV 0 expands, to 0) and clears the counters,
which saturate at ``2**counter_bits - 1``: requests = expanded + bad_ev, profiles = configured + refused.
"""
from dataclasses import dataclass

from models import wire
from models.contract import Counters
from models.params import Params, check, param

__all__ = ["EvExpanderParams", "EvExpanderModel", "COUNTERS", "FIELD_MEMBERS", "profile", "refusal", "pdep",
           "pext", "expand", "contract", "ev_of_bytes", "bytes_of"]

#: Per-request counters (expanded + bad_ev = requests), then per-profile ones (configured + refused).
COUNTERS = ("expanded", "bad_ev", "configured", "refused")
#: ``struct mrc_ctl_ev_field``'s members, in order.
FIELD_MEMBERS = ("width", "init_val", "min_val", "max_val", "mask")


@dataclass(frozen=True, kw_only=True)
class EvExpanderParams(Params):
    """Parameters of ``EvExpander`` and its model."""
    ev_bits: int = param(64, lo=1, hi=wire.EV_T_BITS,
                         doc="EV bits taken (OCP's ev_max_width): the first ev_bits bits of ev_t")
    exp_bits: int = param(128, lo=1, hi=wire.EV_T_BITS,
                          doc="expanded bits given: the first exp_bits bits of the expanded ev_t")
    max_fields: int = param(8, lo=1, hi=64, doc="format fields (and EV fields) a profile may have")
    field_bits: int = param(wire.EV_FIELD_BITS, lo=1, hi=wire.EV_FIELD_BITS, doc="widest EV field")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width (counters saturate)")


def profile(mode, fmt_widths, fields):
    """The configuration payload of a profile: ``mode`` (``wire.EV_FMT_MODE_*``), the format widths and
    the EV fields, each a dict of ``FIELD_MEMBERS`` or a tuple in their order."""
    fields = [dict(f) if isinstance(f, dict) else dict(zip(FIELD_MEMBERS, f)) for f in fields]
    return {"ev_fmt_mode": mode, "fmt_field_count": len(fmt_widths), "fmt_fields": list(fmt_widths),
            "field_count": len(fields), "fields": fields}


def _entries(prof):
    """(format widths, fields) of a payload, as many as its counts say (entries past a list are 0)."""
    fmts = list(prof.get("fmt_fields", []))
    fields = [{m: f.get(m, 0) for m in FIELD_MEMBERS} for f in prof.get("fields", [])]
    fmts += [0] * (prof["fmt_field_count"] - len(fmts))
    fields += [dict.fromkeys(FIELD_MEMBERS, 0)] * (prof["field_count"] - len(fields))
    return fmts[:prof["fmt_field_count"]], fields[:prof["field_count"]]


def _ones(x):
    return bin(x).count("1")


def refusal(prof, params):
    """Why ``params``' block refuses profile ``prof`` (a sentence), or None if it takes it."""
    p = params
    if max(prof["fmt_field_count"], prof["field_count"]) > p.max_fields:
        return f"E2BIG: more than max_fields = {p.max_fields} fields"
    fmts, fields = _entries(prof)
    # OCP's check_profs
    if len(fields) > len(fmts):
        return "check_profs: num_fields > num_fmt_fields"
    if sum(f["width"] for f in fields) > sum(fmts):
        return "check_profs: sum of field widths > sum of fmt_field widths"
    for i, f in enumerate(fields):
        if f["width"] > wire.EV_FIELD_BITS:
            return f"check_profs: field {i} wider than 32 bits"
        if f["init_val"] >> f["width"]:
            return f"check_profs: field {i} init_val wider than its width"
        if f["mask"] >> f["width"]:
            return f"check_profs: field {i} mask has bits outside its width"
        if f["mask"] and f["max_val"] >> _ones(f["mask"]):
            return f"check_profs: field {i} max_val wider than its mask bits"
    # mrc_ctl.h: the format modes and ev_t's layout; the device's capabilities
    if prof["ev_fmt_mode"] not in (wire.EV_FMT_MODE_STEV, wire.EV_FMT_MODE_SRV6):
        return f"ev_fmt_mode = {prof['ev_fmt_mode']}: not STEV or SRv6"
    limit = wire.STEV_BITS if prof["ev_fmt_mode"] == wire.EV_FMT_MODE_STEV else wire.SRV6_BITS
    if sum(fmts) > limit:
        return f"ev_t: format of {sum(fmts)} bits, more than the mode's {limit}"
    if sum(fmts) > p.exp_bits:
        return f"E2BIG: format of {sum(fmts)} bits, more than exp_bits = {p.exp_bits}"
    if any(f["width"] > p.field_bits for f in fields):
        return f"E2BIG: a field wider than field_bits = {p.field_bits}"
    if sum(_ones(f["mask"]) for f in fields) > p.ev_bits:
        return f"ev_max_width: masks take more than ev_bits = {p.ev_bits} EV bits"
    return None


def _check_payload(prof, params):
    """ValueError unless every member of ``prof`` fits its field of the configuration port."""
    count = params.max_fields.bit_length()
    limits = {"ev_fmt_mode": 3, "fmt_field_count": count, "field_count": count}
    for name, bits in limits.items():
        if not 0 <= prof[name] < 1 << bits:
            raise ValueError(f"profile {name} = {prof[name]!r}: must fit {bits} bits")
    for i, w in enumerate(prof.get("fmt_fields", [])):
        if not 0 <= w < 1 << wire.EV_FMT_WIDTH_BITS:
            raise ValueError(f"profile fmt_fields[{i}] = {w!r}: must fit {wire.EV_FMT_WIDTH_BITS} bits")
    for i, f in enumerate(prof.get("fields", [])):
        for m in FIELD_MEMBERS:
            if not 0 <= f.get(m, 0) < 1 << wire.EV_FIELD_BITS:
                raise ValueError(f"profile fields[{i}].{m} = {f.get(m)!r}: must be a uint32_t")


def _apply_mask(init_val, extracted, mask, width):
    """OCP's ``apply_mask_to_value``: the extracted bits, from their LSB, onto the mask's set bits from
    bit 0 up, overwriting ``init_val`` there."""
    result, k = init_val, 0
    for i in range(width):
        if mask >> i & 1:
            result = (result & ~(1 << i)) | ((extracted >> k & 1) << i)
            k += 1
    return result


class EvExpanderModel:
    """Takes the ``EvExpanderParams`` of ``EvExpander`` (TransactionModel, ``models/contract.py``)."""

    KIND = "transaction"

    def __init__(self, params=None):
        self.params = check(params, EvExpanderParams)
        self._counters = Counters(COUNTERS, self.params.counter_bits, "saturate")
        self.reset()

    def reset(self):
        self.fmts, self.fields = [], []
        self._counters.clear()

    def counters(self):
        return self._counters()

    @property
    def consumed(self):
        """EV bits the profile's masks take."""
        return sum(_ones(f["mask"]) for f in self.fields)

    def process(self, port, item):
        if port == "cfg":
            self._configure(item)
            return {}
        if port == "i":
            return {"o": [self._expand(item["ev"])]}
        raise ValueError(f"port = {port!r}: the expander takes 'cfg' and 'i'")

    def _configure(self, prof):
        _check_payload(prof, self.params)
        if refusal(prof, self.params) is not None:
            self._counters.add("refused")
            return
        self.fmts, self.fields = _entries(prof)
        self._counters.add("configured")

    def _expand(self, ev):
        bits, out_bits = self.params.ev_bits, self.params.exp_bits
        if not 0 <= ev < 1 << bits:
            raise ValueError(f"ev = {ev!r}: must be an ev_bits = {bits} bit value")
        src = dst = exp_ev = 0
        for fmt_width, f in zip(self.fmts, self.fields):
            value = f["init_val"]
            if f["mask"]:
                k = _ones(f["mask"])
                extracted = ev >> (bits - src - k) & ((1 << k) - 1)     # ev_extract_bits: MSB first
                value = _apply_mask(value, extracted, f["mask"], f["width"])
                src += k
            exp_ev |= (value & ((1 << fmt_width) - 1)) << (out_bits - dst - fmt_width)
            dst += fmt_width
        if ev & ((1 << (bits - src)) - 1):                               # verify_unused_bits_zero
            self._counters.add("bad_ev")
            return {"ok": False, "exp_ev": exp_ev}
        self._counters.add("expanded")
        return {"ok": True, "exp_ev": exp_ev}


# --- Oracles (tests): PDEP-style, written on bit strings unlike the model ---------------------------

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


def expand(ev, prof, ev_bits=wire.EV_T_BITS, exp_bits=wire.EV_T_BITS):
    """Oracle: the expansion of ``ev`` (``ev_bits`` wide) under an accepted profile ``prof`` as an
    ``exp_bits``-wide integer, or None if EV bits past the consumed ones are set."""
    fmts, fields = _entries(prof)
    text = format(ev, f"0{ev_bits}b")
    used, slots = 0, ""
    for width, f in zip(fmts, fields):
        k = _ones(f["mask"])
        value = (f["init_val"] & ~f["mask"]) | pdep(int(text[used:used + k] or "0", 2), f["mask"])
        used += k
        slots += format(value, f"0{max(width, 32)}b")[-width:] if width else ""
    if "1" in text[used:]:
        return None
    return int((slots + "0" * exp_bits)[:exp_bits], 2)


def contract(exp_ev, prof, ev_bits=wire.EV_T_BITS, exp_bits=wire.EV_T_BITS):
    """Oracle, inverse of ``expand`` where every mask bit lands in its slot: the EV giving ``exp_ev``."""
    fmts, fields = _entries(prof)
    ev, used, shift = 0, 0, exp_bits
    for width, f in zip(fmts, fields):
        shift -= width
        used += _ones(f["mask"])
        ev |= pext(exp_ev >> shift & ((1 << width) - 1), f["mask"]) << (ev_bits - used)
    return ev


def ev_of_bytes(raw, bits):
    """The first ``bits`` bits of an ``ev_t`` (bytes) as an integer, bit 7 of byte 0 its MSB."""
    return int.from_bytes(raw, "big") >> (8 * len(raw) - bits)


def bytes_of(value, bits, size=wire.EV_T_BITS // 8):
    """An ``ev_t`` (``size`` bytes) whose first ``bits`` bits are ``value``, the rest zero."""
    return (value << (8 * size - bits)).to_bytes(size, "big")
