"""The checked engine's expected outputs: the golden model through the one lockstep over a whole stimulus,
as the ``Checked`` wrapper drives the block (``session``), and the side memory of a run (``side_table``)."""
import copy
import time

from amaranth.lib import data

from testbenches.checked.wrapper import CHECKS, NO_CYCLE, SIDE, bits, command_port, side_inputs, stream_ports
from testbenches.layouts import pack

__all__ = ["Expected", "Side", "side_table", "lockstep_runner", "session", "expect", "TAIL", "split_commands"]


class Expected:
    """What the golden model says a run must show: per output stream, ``(cycle, value, mask)`` beats
    (cycle ``NO_CYCLE`` when the model is not cycle-accurate), the cycles to run (``limit``; None:
    until quiet), the cycle the last input beat is accepted in (None: not checked), the counters (and, of a
    cycle model, the block's other outputs: its end state), the commands of the run, ``(after, value)``:
    offered once ``after`` input beats went in, and a cycle model's checkpoints: ``(cycle, value, mask)``
    of the block's other outputs side by side (``Checked``'s ``bad_state``), at most ``CHECKS``."""

    def __init__(self, outputs, limit=None, last_accept=None, counters=None, model_seconds=0.0, side=None,
                 commands=None, checkpoints=None):
        self.outputs, self.limit, self.last_accept = outputs, limit, last_accept
        self.counters, self.model_seconds, self.side = counters or {}, model_seconds, side
        self.commands, self.checkpoints = commands or [], checkpoints or []


#: Cycles a cycle-accurate model runs after the last input beat went in.
TAIL = 64


def split_commands(items):
    """(input beats, [(after, command payload dict)]) of a batch's stimulus items (a command item is
    ``{"cmd": payload}``, offered once the ``after`` beats before it went in)."""
    beats, commands = [], []
    for item in items:
        if "cmd" in item:
            commands.append((len(beats), item["cmd"]))
        else:
            beats.append(item)
    return beats, commands


def _packets(beats, width):
    """(raw bytes, meta) of each packet of ``hdl.packet`` beat dicts, at its last beat."""
    partial = bytearray()
    for beat in beats:
        partial += beat["data"].to_bytes(width, "little")[:bin(beat["keep"]).count("1")]
        if beat["last"]:
            yield bytes(partial), beat["meta"]
            partial = bytearray()


class Side:
    """One entry of the side memory: the block's other inputs (name -> value), a stall per output and
    whether ``i`` idles (``gap``: no beat offered, the payload inverted: garbage a block must ignore)."""

    def __init__(self, inputs, stall, gap=False):
        self.inputs, self.stall, self.gap = inputs, stall, gap


def side_table(name, component, params, rng=None):
    """The side memory of a run: ``SIDE`` entries, all zero (outputs always ready) without ``rng``; with
    it, each output stalls one cycle in four (never one of the model's
    ``IGNORES_READY``, whose beats a stall would lose), ``i`` idles one cycle in eight, every port's ``qdepth``
    walks at random in [0, 2 * high], a step of -2..2 a cycle (the spill buffer forwards, spills and
    drains in turn), and a ``pause`` or ``*_pause`` input (a link's back-pressure) is set one cycle in eight."""
    inputs, outs = side_inputs(component), [port for port, _ in stream_ports(component)[1]]
    high = next((v for k, v in params.flat().items() if k.rsplit(".", 1)[-1] == "high"), 0)
    walk = {}

    def value(field, shape):
        if field == "qdepth" and rng is not None:
            depth = walk.setdefault(field, [rng.randrange(2 * high + 1) for _ in range(shape.length)])
            depth[:] = [min(2 * high, max(0, q + rng.randrange(-2, 3))) for q in depth]
            return list(depth)
        if field.rsplit("_", 1)[-1] == "pause" and rng is not None:
            return int(rng.randrange(8) == 0)
        return [0] * shape.length if isinstance(shape, data.ArrayLayout) else 0
    import registry
    model = registry.block(name).model
    stalls = rng is not None
    steady = set(getattr(model, "IGNORES_READY", ()))
    return [Side({field: value(field, shape) for field, shape in inputs},
                 tuple(stalls and port not in steady and rng.randrange(4) == 0 for port in outs),
                 stalls and rng.randrange(8) == 0)
            for _ in range(SIDE)]


def _side_words(component, table):
    """The side memory's words of ``table``."""
    inputs, words = side_inputs(component), []
    for entry in table:
        word, at = 0, 0
        for field, shape in inputs:
            word |= pack(shape, entry.inputs[field]) << at
            at += bits(shape)
        for port, stall in enumerate(entry.stall):
            word |= int(stall) << (at + port)
        words.append(word | int(entry.gap) << (at + len(entry.stall)))
    return words


def lockstep_runner(lockstep, table, tail=TAIL):
    """The golden model of ``lockstep`` as a batch runner ``run(items, final) -> Expected``, driven as the
    ``Checked`` wrapper drives the block. A cycle model steps once a cycle: ``i`` offered from the
    batch's beats at the rate the model's ``i__ready`` takes them (not in the side memory's gaps), the command
    stream from the batch's
    command items (offered once the beats before them went in; ``i`` waits meanwhile), every other
    input stream idle, the other inputs and each output's ready from the side memory ``table``; an
    output transfer is an expected beat with its cycle; the batch ends in the cycle its last input goes
    in (``final``: ``tail`` cycles later). A transaction model takes the items in order and its outputs
    are expected in order, without cycles."""
    ports = lockstep.ports
    stimulus = ports.by_name["i"]
    command = next((p for p in ports.streams_in if p.name != "i"), None)
    if lockstep.kind == "transaction":
        def run_items(items, final):
            outputs = {}
            for item in items:
                port, value = (command, item["cmd"]) if "cmd" in item else (stimulus, item)
                for name, beats in lockstep.feed(port.name, pack(port.layout, value)).items():
                    outputs.setdefault(name, []).extend((NO_CYCLE, word, mask) for word, mask in beats)
            return Expected(outputs, counters=lockstep.model.counters())
        return run_items

    idle = {f"{p.name}__{k}": v for p in ports.streams_in if p.name not in ("i", getattr(command, "name", None))
            for k, v in (("valid", 0), ("payload", None))}
    # each side memory entry's inputs, worked out once: the other inputs, then each output's ready
    from_side = [{**side.inputs, **{f"{port.name}__ready": int(not stall)
                                    for port, stall in zip(ports.streams_out, side.stall)}} for side in table]
    if command is not None:
        command_valid, command_payload, command_ready = (f"{command.name}__{k}" for k in ("valid", "payload", "ready"))

    def cycle_inputs(cycle, beat, cmd):
        """The model's inputs in ``cycle``: ``beat`` and ``cmd`` offered (None: nothing), the side memory's."""
        inputs = {"i__valid": int(beat is not None), "i__payload": beat, **idle}
        if command is not None:
            inputs[command_valid], inputs[command_payload] = int(cmd is not None), cmd
        inputs.update(from_side[cycle % SIDE])
        return inputs

    others = [(p.name, bits(p.layout)) for p in ports.plain_out]
    streams_out = [(p.name, f"{p.name}__valid", f"{p.name}__payload") for p in ports.streams_out]

    def state(said):
        """(value, mask) of the other outputs side by side, as ``Checked`` compares them (unnamed: mask 0)."""
        value = mask = at = 0
        for name, size in others:
            word, named = lockstep.expected_of(name, said) or (0, 0)
            value, mask, at = value | word << at, mask | named << at, at + size
        return value, mask

    def run_cycles(items, final):
        beats, commands = split_commands(items)
        packets = _lookahead(beats, stimulus) if "i" in lockstep.lookahead else {}
        outputs, index, cycle, after, last, taken = {}, 0, 0, 0, None, 0
        checkpoints, stride = [], 1             # every stride-th cycle, stride doubled to keep at most CHECKS
        n_beats, n_commands = len(beats), len(commands)
        while index < n_beats or taken < n_commands or (final and after < tail):
            side = table[cycle % SIDE]
            cmd = commands[taken][1] if taken < n_commands and commands[taken][0] <= index else None
            beat = beats[index] if index < n_beats and cmd is None and not side.gap else None
            inputs = cycle_inputs(cycle, beat, cmd)
            if beat is not None and index in packets:
                inputs["i__packet"] = packets[index]
            said = lockstep.step(inputs)        # packed (expected_of) only where compared: beats, checkpoints
            if others and cycle % stride == 0:
                checkpoints.append((cycle, *state(said)))
                if len(checkpoints) > CHECKS:
                    stride *= 2
                    checkpoints = [c for c in checkpoints if c[0] % stride == 0]
            for (name, valid, payload), stall in zip(streams_out, side.stall):
                if not stall and said.get(valid):
                    outputs.setdefault(name, []).append((cycle, *lockstep.expected_of(payload, said)))
            if beat is not None and said["i__ready"]:
                index, last = index + 1, cycle
            if cmd is not None and said[command_ready]:
                taken += 1
            cycle += 1
            after += index == n_beats and taken == n_commands
        # the end state: the counters, and each other output of the block the model gives (a sticky flag, a
        # credit count) as the frozen block shows them, after the batch's last edge: the outputs of one more
        # cycle with nothing offered, from a copy of the model (the batch's last cycle showed the state before)
        flags = {}
        if cycle:
            said = copy.deepcopy(lockstep.model).step(cycle_inputs(cycle, None, None))
            flags = {p.name: said[p.name] for p in ports.plain_out if isinstance(said.get(p.name), int)}
        return Expected(outputs, cycle, last, {**flags, **lockstep.model.counters()}, checkpoints=checkpoints)
    return run_cycles


def _lookahead(beats, port):
    """``{index of a packet's first beat: Packet}`` of a batch's beats (a model's ``LOOKAHEAD``)."""
    from models.contract import Packet
    out, start = {}, 0
    for n, beat in enumerate(beats):
        if beat["last"]:
            raw, meta = next(_packets(beats[start:n + 1], port.bytes))
            out[start] = Packet(raw, meta)
            start = n + 1
    return out


def session(name, component, params, rng=None):
    """The golden model of block ``name`` as a batch runner ``run(beats, final=True) -> Expected``
    (timed: ``Expected.model_seconds``), its state kept from one batch to the next; ``rng``: random
    side inputs and output stalls (``side_table``), else outputs always ready and ``qdepth`` 0."""
    import registry
    from testbenches.lockstep import Lockstep
    table = side_table(name, component, params, rng)
    adapter = lockstep_runner(Lockstep(component, registry.block(name).model(params)), table)
    words = _side_words(component, table)
    command = command_port(component)

    def run(items, final=True):
        start = time.perf_counter()
        result = adapter(items, final)
        result.model_seconds = time.perf_counter() - start
        result.side = words
        commands = split_commands(items)[1]
        if commands and command is None:
            raise ValueError(f"{name}: commands in the stimulus of a block without a command stream")
        result.commands = [(after, pack(command[1], cmd)) for after, cmd in commands]
        for port, _ in stream_ports(component)[1]:
            result.outputs.setdefault(port, [])
        return result
    return run


def expect(name, component, params, beats):
    """The golden model's ``Expected`` for one whole run of ``beats`` (dicts) on block ``name``."""
    return session(name, component, params)(beats)
