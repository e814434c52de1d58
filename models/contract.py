"""The model contract: what every golden model offers the framework, in one place.

A golden model implements one of two protocols, chosen per block in the registry (``Block.model``'s
``KIND``). Both speak the Component's own port names, as Amaranth's Verilog export spells them:
a stream port ``x`` is ``x__valid``, ``x__ready`` and ``x__payload``; any other port keeps its name
(``qdepth``, a counter).

``CycleModel`` (``KIND = "cycle"``): ``step(inputs) -> outputs`` is one clock cycle.

- ``inputs`` holds the value of every input port of the Component in that cycle (what is on the
  wires before the rising edge): ``i__valid``, ``i__payload`` (a dict in the port's layout, or None
  while ``valid`` is low), ``o__ready``, ``qdepth``, ...
- the return value holds the output ports' values in that same cycle (an output may depend on that
  cycle's inputs: a combinational path), then the model advances its state as the clock edge does.
  Every port the model names is compared with the RTL's in that cycle; a port it leaves out is not
  compared then. A payload is compared only while its ``valid`` is 1; a field left out of a payload
  dict is not compared, nor are a packet beat's data bytes past ``keep``. ``Masked(value, mask)``
  compares only the bits of ``mask`` of one field.

``TransactionModel`` (``KIND = "transaction"``): ``process(port, item) -> {port: [items]}`` is one
transfer into the block, taken in the order the RTL took it (over every input stream). An item of a
packet stream (``hdl/packet.py``: ``data``, ``keep``, ``first``, ``last``, ``meta``) is a
``Packet(data, meta)``; of any other stream, its payload dict. The return value lists the items the
transfer makes each output stream send, in order; they are compared in order with what the RTL
sends, not by cycle.

Both have ``reset()`` (the Component's ``rst``: a model's SRAM may survive it, as the RTL's does) and
``counters()``, the values the counter ports must show (``{name: value}``), compared whenever the
block is quiet and at the end of a run; ``Counters`` keeps them.

Hooks: a model may declare what the contract cannot carry, each by name, and the lockstep honours it.

- ``LOOKAHEAD = ("i", ...)``: the model needs a packet's bytes in the cycle of its first beat (it
  decides per packet, the RTL per beat on the bytes that have arrived); the lockstep adds
  ``inputs["i__packet"] = Packet(data, meta)`` to that cycle's inputs, the whole packet the beat
  starts.
- ``IGNORES_READY = ("o", ...)``: output streams whose ``ready`` the block ignores (its consumer must
  take a beat every cycle it is valid); the checked engine and the soak never stall them, where a stall
  would lose the beat unchecked.
"""
from typing import Any, Mapping, NamedTuple, Protocol, runtime_checkable

__all__ = ["CycleModel", "TransactionModel", "Packet", "Masked", "Counters", "KINDS", "kind_of"]

#: The protocol names a model's ``KIND`` may take.
KINDS = ("cycle", "transaction")


class Packet(NamedTuple):
    """A whole packet on a packet stream: its bytes and its sideband (``meta`` dict)."""
    data: bytes
    meta: Mapping[str, Any] = {}


class Masked(NamedTuple):
    """An expected field value of which only the bits of ``mask`` are compared."""
    value: int
    mask: int


@runtime_checkable
class CycleModel(Protocol):
    """A cycle-accurate golden model (module docstring)."""
    KIND: str

    def step(self, inputs: Mapping[str, Any]) -> dict[str, Any]: ...

    def reset(self) -> None: ...

    def counters(self) -> dict[str, int]: ...


@runtime_checkable
class TransactionModel(Protocol):
    """A transaction-level golden model (module docstring)."""
    KIND: str

    def process(self, port: str, item: Any) -> dict[str, list]: ...

    def reset(self) -> None: ...

    def counters(self) -> dict[str, int]: ...


def kind_of(model):
    """``"cycle"`` or ``"transaction"``: which protocol ``model`` (a class or an instance) implements;
    ``TypeError`` naming what is missing otherwise."""
    name = getattr(model, "__name__", type(model).__name__)
    kind = getattr(model, "KIND", None)
    if kind not in KINDS:
        raise TypeError(f"{name}.KIND = {kind!r}: must be one of {', '.join(KINDS)} (models/contract.py)")
    needs = ("step" if kind == "cycle" else "process", "reset", "counters")
    missing = [m for m in needs if not callable(getattr(model, m, None))]
    if missing:
        raise TypeError(f"{name} (KIND {kind!r}) lacks {', '.join(missing)} (models/contract.py)")
    return kind


class Counters:
    """A model's counters, each ``bits`` wide, that either ``saturate`` at the top or ``wrap`` to 0:
    ``overflow`` says which, the RTL's choice made explicit. ``counters.add(name, n=1)``; calling the
    object gives the ``{name: value}`` snapshot the contract's ``counters()`` returns; ``clear()`` is
    a reset."""

    def __init__(self, names, bits, overflow):
        if overflow not in ("saturate", "wrap"):
            raise ValueError(f"Counters.overflow = {overflow!r}: must be 'saturate' or 'wrap'")
        if not isinstance(bits, int) or isinstance(bits, bool) or bits < 1:
            raise ValueError(f"Counters.bits = {bits!r}: must be an int >= 1")
        self.names, self.top, self.overflow = tuple(names), (1 << bits) - 1, overflow
        self.clear()

    def clear(self):
        self.values = dict.fromkeys(self.names, 0)

    def add(self, name, n=1):
        value = self.values[name] + n
        self.values[name] = min(value, self.top) if self.overflow == "saturate" else value & self.top

    def __getitem__(self, name):
        return self.values[name]

    def __call__(self):
        return dict(self.values)
