"""The one lockstep: a Component's golden model run beside its RTL, port by port.

``Lockstep(component, model)`` reads the Component's signature (``Ports``) and speaks the model
contract (``models/contract.py``) in the Component's own port names. Every service that compares RTL
and model goes through it: the cocotb monitor of ``BlockTB`` (``cycle``: every port's value in one
clock cycle, read from the simulator), the checked engine's expected outputs
(``testbenches/checked/expected.py``: ``predict`` and ``feed`` on a stimulus, no simulator), the soak,
scenario replay and the bench stimulus (both through the checked engine).

- A cycle model (``KIND = "cycle"``) gets, each cycle, the value of every input port and names the
  output ports it predicts; ``predict`` turns them into ``{port: (word, mask)}``, ``compare`` checks an
  RTL cycle against them (a payload only while its ``valid`` is 1; a packet beat's data bytes past
  ``keep`` are not compared).
- A transaction model (``KIND = "transaction"``) gets each transfer into the block in the order the
  RTL took it (packets whole, at their last beat); ``feed`` gives the items that transfer makes each
  output send, as expected beats; ``cycle`` compares each RTL output transfer with the next one.
"""
import collections

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In

from models.contract import Packet, kind_of
from models.packet import beats_of
from testbenches.layouts import expect, expecter, pack, unpack, unpacker, width

__all__ = ["Port", "Ports", "Lockstep", "Mismatch", "packet_mask"]


class Mismatch(AssertionError):
    """The RTL and the golden model disagree; the message names the cycle, the port and the fields."""


class Port:
    """One port of a Component: ``name``; ``stream`` (a stream port: ``layout`` is its payload's) or
    a plain port (``layout`` is its shape); ``inward`` (``In``); ``packet`` (an ``hdl/packet.py``
    byte stream, ``bytes`` wide)."""

    def __init__(self, name, member):
        self.name, self.inward = name, member.flow == In
        self.stream = member.is_signature and isinstance(member.signature, stream.Signature)
        self.layout = member.signature.members["payload"].shape if self.stream else member.shape
        fields = dict(self.layout) if isinstance(self.layout, data.StructLayout) else {}
        self.packet = self.stream and set(fields) == {"data", "keep", "first", "last", "meta"}
        self.bytes = width(fields["keep"].shape) if self.packet else 0
        if self.packet:
            self.meta = fields["meta"].shape
            self._last, self._first = fields["last"].offset, fields["first"].offset
            self._keep, self._data, self._meta = fields["keep"].offset, fields["data"].offset, fields["meta"].offset
            self._fields = ((1 << self.layout.size) - 1) & ~(((1 << 8 * self.bytes) - 1) << self._data)

    def last(self, word):
        """Whether the beat ``word`` ends a packet (every beat of a non-packet stream does)."""
        return not self.packet or bool(word >> self._last & 1)

    def first(self, word):
        return not self.packet or bool(word >> self._first & 1)


class Ports:
    """The ports of a Component, in signature order, and their flat names as the Verilog spells them
    (``x__valid``, ``x__ready``, ``x__payload`` of a stream ``x``; a plain port's own name)."""

    def __init__(self, component):
        members = component.signature.members
        self.all = [Port(name, member) for name, member in members.items()]
        self.by_name = {p.name: p for p in self.all}
        self.streams_in = [p for p in self.all if p.stream and p.inward]
        self.streams_out = [p for p in self.all if p.stream and not p.inward]
        self.plain_in = [p for p in self.all if not p.stream and p.inward]
        self.plain_out = [p for p in self.all if not p.stream and not p.inward]
        #: flat name -> payload layout or shape, for the inputs and the outputs of the Component
        self.inputs, self.outputs = {}, {}
        for p in self.all:
            if p.stream:
                driven, read = (self.inputs, self.outputs) if p.inward else (self.outputs, self.inputs)
                driven[f"{p.name}__valid"] = read[f"{p.name}__ready"] = wiring.Shape.cast(1)
                driven[f"{p.name}__payload"] = p.layout
            else:
                (self.inputs if p.inward else self.outputs)[p.name] = p.layout
        #: flat name -> its ``unpack`` (an input) or ``expect`` (an output), worked out once: the lockstep calls
        #: them on every port of every cycle
        self.unpack = {name: unpacker(layout) for name, layout in self.inputs.items()}
        self.expect = {name: expecter(layout) for name, layout in self.outputs.items()}
        #: an output payload's flat name -> (its ``valid``'s flat name, its port)
        self.payloads = {f"{p.name}__payload": (f"{p.name}__valid", p) for p in self.streams_out}

    def names(self):
        """Every flat port name."""
        return [*self.inputs, *self.outputs]


def packet_mask(port, word):
    """The mask of a packet beat's compared bits: every field, and the data bytes ``keep`` covers."""
    keep = word >> port._keep & ((1 << port.bytes) - 1)
    return port._fields | ((1 << 8 * keep.bit_length()) - 1) << port._data


def _wide(value):
    return isinstance(value, int) and value >> 64


def _difference(rtl, model, mask):
    """How a field differs in its compared bits: ``(RTL, model)``; a field wider than 64 bits (packet data,
    header bytes) as ``{"byte n": (RTL, model)}`` of its differing bytes; None if the compared bits agree."""
    if not isinstance(rtl, int):
        return rtl, model
    diff = (rtl ^ model) & mask
    if not diff:
        return None
    if not (_wide(rtl) or _wide(model) or _wide(mask)):
        return rtl, model
    return {f"byte {n}": (f"{rtl >> 8 * n & 255:#04x}", f"{model >> 8 * n & 255:#04x}")
            for n in range((diff.bit_length() + 7) // 8) if diff >> 8 * n & 255}


def _brief(value):
    """A payload as printed: a field wider than 64 bits as its first 16 bytes in hex, byte 0 first."""
    if not isinstance(value, dict):
        return value
    return {k: v.to_bytes(16 + (v.bit_length() + 7) // 8, "little")[:16].hex() + "..." if _wide(v) else v
            for k, v in value.items()}


class Lockstep:
    """``model`` beside ``component`` (module docstring). ``cycles`` counts the cycles compared since
    the last ``reset``."""

    def __init__(self, component, model):
        self.ports, self.model, self.kind = Ports(component), model, kind_of(model)
        self.lookahead = tuple(getattr(model, "LOOKAHEAD", ()))
        self.reset()

    def reset(self):
        """The Component's reset: the model's, and every partial packet and pending expectation dropped."""
        self.model.reset()
        self.cycles = 0
        self.partial = collections.defaultdict(list)        # transaction models: beats of an item going in
        self.leaving = collections.defaultdict(list)        # and of one coming out
        self.pending = collections.defaultdict(collections.deque)   # expected output beats, (word, mask)
        self.matched = collections.Counter()

    # --- cycle models ------------------------------------------------------------------------------

    def inputs(self, values, packets=None):
        """The model's inputs of one cycle from the input ports' integer ``values`` (flat names): a
        payload unpacked while its ``valid`` is 1 (None otherwise); ``packets(port) -> Packet`` gives
        the whole packet of a first beat on a ``LOOKAHEAD`` port."""
        out = {}
        for name, unpacked in self.ports.unpack.items():
            if name.endswith("__payload"):
                port = name[:-9]
                valid = values[f"{port}__valid"]
                out[name] = unpacked(values[name]) if valid else None
                if valid and port in self.lookahead and out[name]["first"]:
                    out[f"{port}__packet"] = packets(port)
            else:
                out[name] = unpacked(values[name])
        return out

    def predict(self, inputs):
        """One cycle of a cycle model: ``inputs`` (``inputs()``'s dict) in; the outputs it names as
        ``{flat name: (word, mask)}`` (``expected_of``) and the model's own dict of them."""
        said = self.step(inputs)
        expected = {name: self.expected_of(name, said) for name in said}
        return {name: value for name, value in expected.items() if value is not None}, said

    def step(self, inputs):
        """One cycle of a cycle model: ``inputs`` in, the model's dict of the outputs it names out (``KeyError``
        for a name that is no output port); ``expected_of`` packs those a caller compares."""
        said = self.model.step(inputs)
        if not said.keys() <= self.ports.outputs.keys():
            unknown = said.keys() - self.ports.outputs.keys()
            raise KeyError(f"{type(self.model).__name__}.step named {sorted(unknown)}, not output ports of the "
                           f"Component (outputs: {', '.join(self.ports.outputs)})")
        self.cycles += 1
        return said

    def expected_of(self, name, said):
        """Output ``name`` of a cycle's ``said`` (``step``'s) as the RTL's port shows it, ``(word, mask)`` (a
        payload's mask covers what it names; a packet beat's, the bytes of ``keep``); None when it is not
        compared: unnamed, or a payload while its ``valid`` is low."""
        value, payload = said.get(name), self.ports.payloads.get(name)
        if value is None or (payload and said.get(payload[0], 1) == 0):
            return None
        word, mask = self.ports.expect[name](value)
        if payload and payload[1].packet:
            mask &= packet_mask(payload[1], word)
        return word, mask

    def compare(self, expected, values, where):
        """Raise ``Mismatch`` unless the RTL's output ``values`` (flat names) agree with ``expected``."""
        wrong = []
        for name, (word, mask) in expected.items():
            if name.endswith("__payload"):
                valid = expected.get(f"{name[:-9]}__valid", (values[f"{name[:-9]}__valid"], 1))[0]
                if not valid:
                    continue
            if (values[name] ^ word) & mask:
                wrong.append(name)
        if wrong:
            raise Mismatch(f"{where}: " + "; ".join(self._describe(n, values[n], *expected[n]) for n in wrong))

    def _describe(self, name, got, word, mask):
        layout = self.ports.outputs[name]
        if isinstance(layout, data.StructLayout):
            rtl, model, named = unpack(layout, got), unpack(layout, word), unpack(layout, mask)
            fields = {k: _difference(rtl[k], model[k], named[k]) for k in rtl if named[k] and rtl[k] != model[k]}
            fields = {k: v for k, v in fields.items() if v}
            return f"{name}: RTL {_brief(rtl)}, model {_brief(model)}; differing fields (RTL, model) {fields}"
        return f"{name}: RTL {unpack(layout, got)}, model {unpack(layout, word)}" + \
            (f" (compared bits {mask:#x})" if mask != (1 << width(layout)) - 1 else "")

    # --- transaction models --------------------------------------------------------------------------

    def feed(self, port, word):
        """A beat ``word`` the RTL took on input stream ``port``: at an item's end (a packet's last beat),
        the model's ``process``; returns ``{output port: [(word, mask) beats]}`` it makes them send."""
        p = self.ports.by_name[port]
        beats = self.partial[port]
        beats.append(word)
        if not p.last(word):
            return {}
        self.partial[port] = []
        item = self._packet(p, beats) if p.packet else unpack(p.layout, word)
        made = self.model.process(port, item)
        out = {}
        for name, items in made.items():
            if name not in self.ports.by_name or self.ports.by_name[name].inward:
                raise KeyError(f"{type(self.model).__name__}.process made items for {name!r}, not an output stream")
            q = self.ports.by_name[name]
            out[name] = [b for it in items for b in (self._beats(q, it) if q.packet else [expect(q.layout, it)])]
        return out

    @staticmethod
    def _packet(port, beats):
        raw = bytearray()
        for word in beats:
            keep = word >> port._keep & ((1 << port.bytes) - 1)
            lanes = word >> port._data & ((1 << 8 * port.bytes) - 1)
            raw += lanes.to_bytes(port.bytes, "little")[:keep.bit_length()]
        return Packet(bytes(raw), unpack(port.meta, beats[-1] >> port._meta))

    @staticmethod
    def _beats(port, item):
        raw, meta = item
        out = []
        for beat in beats_of(raw, meta, port.bytes):
            word = pack(port.layout, beat)
            out.append((word, packet_mask(port, word)))
        return out

    def expect_items(self, made):
        """Queue the expected output beats ``feed`` returned (the online monitor's scoreboard)."""
        for name, beats in made.items():
            self.pending[name].extend(beats)

    def took(self, port, word, where):
        """The RTL sent beat ``word`` on output stream ``port``; at an item's end (a packet's last beat:
        a cut-through block starts a packet before its input has all come in) its beats are compared
        with the next ones the model expects there (``Mismatch`` otherwise)."""
        self.leaving[port].append(word)
        if not self.ports.by_name[port].last(word):
            return
        beats, self.leaving[port] = self.leaving[port], []
        queue, layout = self.pending[port], self.ports.by_name[port].layout
        for word in beats:
            if not queue:
                raise Mismatch(f"{where}: {port} beat {self.matched[port]} {_brief(unpack(layout, word))} that the "
                               "model does not expect")
            want, mask = queue.popleft()
            if (word ^ want) & mask:
                raise Mismatch(f"{where}: {port} beat {self.matched[port]} differs from the golden model: "
                               + self._describe(f"{port}__payload", word, want, mask))
            self.matched[port] += 1

    # --- one RTL cycle, either kind --------------------------------------------------------------------

    def cycle(self, values, packets=None, where=None):
        """One clock cycle of the RTL, ``values`` every port's integer value (flat names) before the
        edge: compared with the model (``Mismatch`` on the first difference)."""
        where = where or f"cycle {self.cycles}"
        if self.kind == "cycle":
            expected, _ = self.predict(self.inputs(values, packets))
            self.compare(expected, values, where)
            return
        self.cycles += 1
        for p in self.ports.streams_in:
            if values[f"{p.name}__valid"] and values[f"{p.name}__ready"]:
                self.expect_items(self.feed(p.name, values[f"{p.name}__payload"]))
        for p in self.ports.streams_out:
            if values[f"{p.name}__valid"] and values[f"{p.name}__ready"]:
                self.took(p.name, values[f"{p.name}__payload"], where)

    def done(self):
        """``Mismatch`` if the model expects output the RTL never sent (a transaction model)."""
        left = {name: len(q) for name, q in self.pending.items() if q}
        if left:
            name = next(iter(left))
            raise Mismatch(f"expected beats never came out of the RTL: {left}; next on {name}: "
                           f"{_brief(unpack(self.ports.by_name[name].layout, self.pending[name][0][0]))}")
