"""Mutant schemata: every mutant of a block's RTL sources in one design, picked by a mutant-select signal.

``rewrite`` turns each file of a block's sources (``tools.mutants.Sources``) into one in which every
mutation site of ``tools.mutants.generate`` (the same operators, the same numbering) is a choice at
run time: mutant ``n`` is selected by ``select() == n + 1``, and 0 selects the design as written.
It works at the Python/Amaranth level, so each mutant is the AST mutant ``tools.mutants`` makes:

- an expression site (``cmp``, ``arith``, ``logic``, ``const``) evaluates its operands once and gives
  ``Mux(select() == n + 1, mutated, original)`` over its variants (``site``);
- a dropped assignment (``drop``) is the assignment under ``with m.If(select() != n + 1)`` (``unless``):
  the signal keeps its value (``sync``) or its default (``comb``), as without it.

Yosys ``mutate -ctrl`` (mcy's way) was not used: it mutates netlist cells, whose mutants do not map back
to the source-level mutants, their numbers and the CSVs of earlier runs.

A site whose operands are elaboration-time Python (a width, a loop bound, a reset value: ``init``) cannot be
chosen at run time; its mutant is *static*, and its value is recorded: when it is the same as the design's at
every evaluation the mutant builds the same design (``same``), otherwise it needs a build of its own. Such a
number is a choice after all where the design only gives it to Amaranth as a number: as the value of an
assignment (``x.eq((1 << H) - 1)``: ``assign``), of a constant of a given shape (``Const((1 << H) - 1, H)``:
``const``, a choice among constants of that one shape), or as an operand of another site, directly or through
a local name bound to it once and read nowhere else (``top = (1 << bits) - 1`` ... ``step == top``, ``x &
mask``): the site is then ``lazy`` and its numbers become the other site's (or the assignment's, or the
constant's) run-time choices. One more exception is a choice after all: a site in the shape of a
``Signal(...)`` whose mutant *narrows* the signal (``Signal(range(E + 1))`` -> ``range(E - 1)``; ``signal``).
The signal keeps the design's width; each assignment to it keeps the mutant's width of its value when the
mutant is selected (``narrow``, on the elaborated design), which is that mutant exactly where the signal is
only used for its number (arithmetic, comparisons, bitwise and/or/xor, assignments, shifts, indices:
Amaranth's operators are exact-width). A use that sees its width (``~``, ``as_signed``, a slice past the
mutant's width, a ``Cat`` part below another, a switch on bits above it, ``len()`` or ``.shape()`` asked
outside Amaranth's own code, of the signal or of an expression whose width follows it) leaves that mutant
static. A variant that raises is a mutant Amaranth cannot elaborate (``invalid``). ``outcomes()`` gives what
the last elaboration saw of each mutant: ``selected`` (a run-time choice), ``same``, ``static``, ``invalid``,
or nothing (its code is not elaborated with these parameters).

Where an arithmetic mutant changes the shape of its result (``a + b`` is unsigned, ``a - b`` signed),
the ``Mux`` has both shapes' union: both branches keep their numeric values (sign- or zero-extended),
which every comparison, arithmetic operation and assignment sees unchanged.
"""
import ast
import contextlib
import os
import sys

from amaranth.hdl import Cat, Const, Instance, Module, Mux, Shape, Signal, Value, ValueCastable, _ast, _ir, _mem

__all__ = ["WIDTH", "ORIGINAL", "MUTANT", "DRIVER", "DRIVER_VERILOG", "select", "selecting", "forcing", "sharing",
           "restricting", "driver", "signal", "narrow", "site", "assign", "const", "unless", "static", "outcomes",
           "clear", "rewrite", "write"]

#: Bits of the mutant-select signal (mutant ``n`` is ``n + 1``; 0 is the design).
WIDTH = 16
#: The name the rewritten sources import this module as.
NAME = "__schemata__"

#: The environment variable that makes a schemata tree build one mutant: its mutant-select value (``n + 1``
#: for mutant ``n``, 0 for the design). Every elaboration in the tree then builds it as ``forcing`` does,
#: except the cocotb runner's (testbenches/runner.py), which builds the schemata once (``sharing``) and
#: gives the simulator the value (``+INNET_MUTANT=<value>``, read by ``DRIVER``).
MUTANT = "INNET_MUTANT"
ORIGINAL = -1


def _from_environment():
    value = os.environ.get(MUTANT)
    if value is None:
        return None
    if not value.isdigit() or int(value) >= 1 << WIDTH:
        raise ValueError(f"{MUTANT}={value!r}: a mutant-select value, 0 (the design) to {(1 << WIDTH) - 1}")
    return int(value) - 1


_select = None
#: The ``Pending`` numbers of sites bound to a local name that no other site has taken yet: {id: Pending}.
_pending = {}
#: The mutant-select values (``n + 1``) whose sites are choices (``restricting``); None: every mutant's.
_included = None
_seen = {}
_holders = {}
#: Elaborate one mutant as its AST mutant would (``forcing``): its id, or ``ORIGINAL`` for the design.
_forced = _from_environment()

#: The Verilog module that drives the mutant-select signal in a simulation: ``+INNET_MUTANT=<value>``, else 0.
DRIVER = "innet_mutsel"
DRIVER_VERILOG = f"""module {DRIVER}(output reg [{WIDTH - 1}:0] value);
  initial if (!$value$plusargs("{MUTANT}=%d", value)) value = {WIDTH}'d0;
endmodule
"""


def select():
    """The mutant-select signal the sites compare (undriven, it is 0: the design as written)."""
    global _select
    if _select is None:
        _select = Signal(WIDTH, name="mutsel")
    return _select


@contextlib.contextmanager
def selecting(signal):
    """Sites elaborated inside compare ``signal`` (a miter's two copies each have their own)."""
    global _select
    before, _select = _select, signal
    try:
        yield signal
    finally:
        _select = before


@contextlib.contextmanager
def forcing(n):
    """Sites elaborated inside are mutant ``n`` itself, not a choice (every other site the design's):
    the design the AST mutant ``n`` of ``tools.mutants`` builds, with no mutant-select signal;
    ``ORIGINAL``: the design as written."""
    global _forced
    before, _forced = _forced, n
    try:
        yield
    finally:
        _forced = before


@contextlib.contextmanager
def sharing():
    """Sites elaborated inside are run-time choices on a fresh mutant-select signal (yielded), whatever
    ``MUTANT`` forces: one build for every mutant (``driver`` drives the signal in a simulation);
    ``outcomes()`` then tells which mutants are static in it (they need a build of their own)."""
    global _forced, _select
    before = _forced, _select
    _forced, _select = None, Signal(WIDTH, name="mutsel")
    try:
        yield _select
    finally:
        _forced, _select = before


@contextlib.contextmanager
def restricting(ids):
    """Sites elaborated inside are choices for the mutants ``ids`` only (None: every mutant's), and the
    design's for the others (nothing recorded of them): a screening of the few mutants an earlier design
    left alive builds little more than the design."""
    global _included
    before, _included = _included, None if ids is None else {n + 1 for n in ids}
    try:
        yield
    finally:
        _included = before


def _in_play(n):
    """Whether the site of mutant-select value ``n`` is a choice here (``restricting``)."""
    return _included is None or n in _included


def driver(signal):
    """An instance of ``DRIVER`` (its source: ``DRIVER_VERILOG``) driving ``signal``."""
    return Instance(DRIVER, o_value=signal)


def _note(n, outcome):
    _seen.setdefault(n - 1, set()).add(outcome)


def outcomes():
    """{mutant id: set of outcomes} of the sites elaborated since ``clear()`` (a narrowing width site ``narrow``
    has not seen the uses of: static; a number bound to a name that the elaboration never read: same)."""
    seen = {n: set(s) for n, s in _seen.items()}
    for pending in _pending.values():
        for n in pending.variants:
            seen.setdefault(n - 1, set()).add("same")
    for narrowed in _narrowed.values():
        for n in narrowed.widths:
            seen.setdefault(n - 1, set()).add("static")
    return seen


def clear():
    _seen.clear()
    _pending.clear()
    _holders.clear()
    _narrowed.clear()
    _unwatch()


def _is_value(x):
    return isinstance(x, (Value, ValueCastable))


def _same(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:                   # values Python cannot compare are not the same
        return False


def _holder(m):
    """The submodule of module ``m`` that drives its sites' signals (outside any ``m.If``)."""
    holder = _holders.get(id(m))
    if holder is None or holder[0] is not m:
        holder = _holders[id(m)] = (m, Module())
        m.submodules += holder[1]
    return holder[1]


class Pending:
    """The elaboration-time value of a ``lazy`` site (an operand of another site, an assignment's value, a
    name read only as either): the design's value and each of its mutants' ({n + 1: value}), for the site
    or assignment that takes it to choose among at run time when its own value is logic (``rd_slot == S -
    1``: the constant's mutants become choices of the compare); ``named``: bound to a local name, which the
    elaboration may never read (``outcomes``: then the same design)."""

    def __init__(self, original, variants, named=False):
        self.original, self.variants = original, variants
        if named:
            _pending[id(self)] = self


def _taken(value):
    """``value``, a ``Pending`` taken by a site or an assignment: no longer waiting (``outcomes``)."""
    _pending.pop(id(value), None)
    return value


def _variants(function, args, variants):
    """{n + 1: thunk} of every mutant of a site: its own, and those of its ``Pending`` operands."""
    plain = [_taken(a).original if isinstance(a, Pending) else a for a in args]
    out = {n: (lambda variant=variant: variant(*plain)) for n, variant in variants.items()}
    for i, a in enumerate(args):
        if isinstance(a, Pending):
            for n, value in a.variants.items():
                out[n] = lambda i=i, value=value: function(*plain[:i], value, *plain[i + 1:])
    return plain, out


def site(m, function, args, variants, lazy=False):
    """``function(*args)``, or variant ``variants[n + 1](*args)`` when mutant ``n`` is selected; a choice
    is a signal of its own, driven in a submodule of ``m`` (``Mux`` trees that share their operands
    would take Amaranth exponential time to size). ``lazy``: the site is an operand of another site or an
    assignment's value (``"named"``: bound to a name read only as those), which chooses among its
    elaboration-time values (``Pending``)."""
    if _forced is not None:
        return variants[_forced + 1](*args) if _forced + 1 in variants else function(*args)
    plain, thunks = _variants(function, args, variants)
    thunks = {n: thunk for n, thunk in thunks.items() if _in_play(n)}
    original = function(*plain)
    if not _is_value(original):
        values = {}
        for n, thunk in thunks.items():
            try:
                values[n] = thunk()
            except Exception:
                _note(n, "invalid")
        if lazy:
            return Pending(original, values, named=lazy == "named")
        return _settled(original, values)
    return _choice(m, original, thunks)


def _settled(original, values):
    """``original``, its mutants' elaboration-time ``values`` ({n + 1: value}) recorded: same or static."""
    for n, value in values.items():
        _note(n, "same" if _same(value, original) else "static")
    return original


def assign(m, target, value):
    """``target.eq(value)``, of a ``lazy`` site's ``value``: its mutants' numbers are run-time choices when
    ``target`` is an Amaranth value (an assignment takes the number of its value, at the target's width)."""
    if isinstance(value, Pending):
        value = _numbers(m, value) if _is_value(target) else _settled(_taken(value).original, value.variants)
    return target.eq(value)


def const(m, value, shape):
    """``Const(value, shape)``, of a ``lazy`` site's ``value``: its mutants' numbers are run-time choices among
    constants of ``shape`` (a value of that very shape, which stands where the constant did)."""
    if not isinstance(value, Pending):
        return Const(value, shape)
    return _numbers(m, value, lambda number: Const(number, shape))


def _numbers(m, pending, make=lambda number: number):
    """``make(number)`` of the ``Pending`` numbers of a site, taken: the design's, or each mutant's when it is
    selected (a mutant whose number is the design's is the same design)."""
    _taken(pending)
    same = {n: v for n, v in pending.variants.items() if _same(v, pending.original)}
    _settled(pending.original, same)
    return _choice(m, make(pending.original), {n: (lambda v=v: make(v)) for n, v in pending.variants.items()
                                                if n not in same})


def _choice(m, original, thunks):
    """``original`` (a value), or ``thunks[n + 1]()`` when mutant ``n`` is selected (``site``)."""
    chosen = base = Value.cast(original)
    for n, thunk in thunks.items():
        try:
            value = Value.cast(thunk())
        except Exception:
            _note(n, "invalid")
            continue
        chosen = Mux(select() == n, value, chosen)
        _note(n, "selected")
    if chosen is not base:
        wire = Signal(chosen.shape())
        _holder(m).d.comb += wire.eq(chosen)
        chosen = wire
    if not isinstance(original, ValueCastable):
        return chosen
    return original.shape()(chosen[:len(Value.cast(original))])


# --- narrowing width sites --------------------------------------------------------------------------------

#: The signals of narrowing width sites elaborated since ``clear()``: {id(signal): _Narrowed}.
_narrowed = {}
#: Value.__len__ and Signal.shape as Amaranth defines them, while ``_watch`` replaces them.
_methods = {}


class _Narrowed:
    """A signal with the design's width and, per mutant-select value, the narrower width its mutant gives it
    (``widths``), compared with ``select``; ``spoiled``: the values whose mutant is not exact as a choice."""

    def __init__(self, signal, widths, select):
        self.signal, self.widths, self.select, self.spoiled = signal, widths, select, set()


def signal(make, shape, ids, *args, src_loc_at=0, **kwargs):
    """``make(shape(), *args, **kwargs)`` (``Signal``) whose shape holds the sites of mutant-select values
    ``ids``: each mutant whose shape is a narrower unsigned one is a choice (``narrow`` decides whether it is
    exact), one whose shape is the design's a choice that changes nothing, the others static, same or invalid
    as ``site`` tells them."""
    if _forced is not None:
        return make(shape(), *args, src_loc_at=src_loc_at + 1, **kwargs)
    with forcing(ORIGINAL):
        original = shape()
    made = make(original, *args, src_loc_at=src_loc_at + 1, **kwargs)
    design, widths = Shape.cast(made.shape()), {}
    for n in filter(_in_play, ids):
        try:
            with forcing(n - 1):
                value = shape()
            mutated = Shape.cast(value)
        except Exception:
            _note(n, "invalid")
            continue
        if _same(value, original):
            _note(n, "same")
        elif mutated == design:
            _note(n, "selected")                # another range of the same width: the design, chosen at run time
        elif mutated.signed or design.signed or mutated.width >= design.width or made.init >> mutated.width:
            _note(n, "static")
        else:
            widths[n] = mutated.width       # static until ``narrow`` finds every use of the signal exact
    if widths:
        _watch()
        _narrowed[id(made)] = _Narrowed(made, widths, select())
    return made


def _watch():
    """Note every ``len()`` and ``.shape()`` of a narrowed signal asked outside Amaranth's hdl package (the
    design's own Python sizing something by it: a mutant would size it by its own width)."""
    if _methods:
        return
    _methods.update(len=Value.__len__, shape=Signal.shape)

    def asked(value):
        narrowed = _narrowed.get(id(value))
        if narrowed is not None and not sys._getframe(2).f_globals.get("__name__", "").startswith("amaranth.hdl"):
            narrowed.spoiled.update(narrowed.widths)

    def length(self):
        asked(self)
        return _methods["len"](self)

    def shape(self):
        asked(self)
        return _methods["shape"](self)
    Value.__len__, Signal.shape = length, shape


def _unwatch():
    if _methods:
        Value.__len__, Signal.shape = _methods.pop("len"), _methods.pop("shape")


def narrow(fragment):
    """Make the narrowing width sites of the elaborated ``fragment`` (every signal ``signal`` made since
    ``clear()``) choices where they are exact: each assignment to a narrowed signal keeps, when mutant ``n``
    is selected, its value at the mutant's width; a mutant with a use that sees its width stays static."""
    _unwatch()
    if not _narrowed:
        return
    uses = _Uses(_narrowed)
    uses.fragment(fragment)
    spoiled = set().union(*(narrowed.spoiled for narrowed in _narrowed.values()))
    for narrowed in _narrowed.values():
        exact = {n: width for n, width in narrowed.widths.items() if n not in spoiled}
        for n in narrowed.widths:
            _note(n, "static" if n in spoiled else "selected")
        for statements, index in uses.writes.get(id(narrowed.signal), ()):
            rhs = value = statements[index].rhs
            for n, width in exact.items():
                value = Mux(narrowed.select == n, _at_width(rhs, width), value)
            statements[index] = _ast.Assign(narrowed.signal, value)
    _narrowed.clear()


def _at_width(value, width):
    """``value`` as a signal ``width`` bits wide holds it (truncated, or sign- or zero-extended)."""
    if width == 0:
        return Const(0, 1)
    if len(value) >= width:
        return value[:width]
    if value.shape().signed:
        return Cat(value, value[-1].replicate(width - len(value)))
    return value


#: Operators whose result is the exact number of its operands' numbers (its width follows theirs).
NUMERIC = {"+", "-", "*", "//", "%", "&", "|", "^", "<<", ">>"}
#: Operators whose one-bit result depends on its operands' numbers only.
TESTS = {"<", "<=", "==", "!=", ">", ">=", "b", "r|", "r^"}


class _Uses:
    """The uses of narrowed signals in an elaborated design: ``writes`` {id(signal): [(statement list,
    index)]} of its whole assignments; a use that is not exact spoils the mutants it concerns. ``value``
    returns the narrowed signals whose width an expression's width follows (``frozenset`` of ids)."""

    def __init__(self, narrowed):
        self.narrowed, self.writes, self.seen = narrowed, {}, {}

    def spoil(self, ids):
        for id_ in ids:
            self.narrowed[id_].spoiled.update(self.narrowed[id_].widths)

    def fragment(self, fragment):
        for statements in fragment.statements.values():
            self.statements(statements)
        if isinstance(fragment, _ir.Instance):
            for value, _kind in fragment.ports.values():
                if isinstance(value, Value):
                    self.spoil(self.value(value))
        if isinstance(fragment, _mem.MemoryInstance):
            for port in (*fragment._read_ports, *fragment._write_ports):
                self.value(port._addr)
                self.spoil(self.value(port._data) | self.value(port._en))
        for sub, _name, _src_loc in fragment.subfragments:
            self.fragment(sub)

    def statements(self, statements):
        for index, statement in enumerate(statements):
            if isinstance(statement, _ast.Assign):
                if id(statement.lhs) in self.narrowed:
                    self.writes.setdefault(id(statement.lhs), []).append((statements, index))
                else:
                    self.target(statement.lhs)
                self.value(statement.rhs)           # an assignment takes its number at the target's width
            elif isinstance(statement, _ast.Switch):
                self.test(statement.test, [patterns for patterns, _, _ in statement.cases])
                for _patterns, body, _src_loc in statement.cases:
                    self.statements(body)
            elif isinstance(statement, _ast.Property):
                self.spoil(self.value(statement.test))
                self.format(statement.message)
            elif isinstance(statement, _ast.Print):
                self.format(statement.message)
            else:
                self.spoil(id(s) for s in statement._rhs_signals() | statement._lhs_signals()
                           if id(s) in self.narrowed)

    def format(self, message):
        for chunk in getattr(message, "_chunks", ()):
            if isinstance(chunk, tuple):
                self.spoil(self.value(chunk[0]))

    def target(self, value):
        """An assignment's target other than a whole narrowed signal: a narrowed signal in it is spoiled."""
        if isinstance(value, Signal):
            self.spoil({id(value)} & self.narrowed.keys())
        elif isinstance(value, (_ast.Slice, _ast.Part)):
            self.target(value.value)
            if isinstance(value, _ast.Part):
                self.value(value.offset)
        elif isinstance(value, _ast.Concat):
            for part in value.parts:
                self.target(part)
        elif isinstance(value, _ast.SwitchValue):
            self.test(value.test, [patterns for patterns, _ in value.cases])
            for _patterns, case in value.cases:
                self.target(case)
        elif isinstance(value, _ast.Operator):
            for operand in value.operands:
                self.target(operand)

    def test(self, value, cases):
        """A switch on ``value`` with the patterns ``cases``: exact on a narrowed signal whose patterns hold
        no bit above the mutant's width (the number the signal holds never has one), or on any value when
        every pattern is all zeros (``Mux``: the value is zero or not)."""
        widthwise = self.value(value)
        patterns = [pattern for case in cases if case is not None for pattern in case]
        if all(set(pattern) <= {"0"} for pattern in patterns):
            return
        narrowed = self.narrowed.get(id(value))
        if narrowed is None:
            self.spoil(widthwise)
            return
        for n, width in narrowed.widths.items():
            if any(set(pattern[:len(pattern) - width]) - {"0"} for pattern in patterns):
                narrowed.spoiled.add(n)

    def value(self, value):
        """Each expression once (a design's expressions share operands: walking them as trees can take
        exponential time)."""
        if id(value) not in self.seen:
            self.seen[id(value)] = (value, self._value(value))
        return self.seen[id(value)][1]

    def _value(self, value):
        if isinstance(value, Signal):
            return frozenset({id(value)} & self.narrowed.keys())
        if isinstance(value, (Const, _ast.ClockSignal, _ast.ResetSignal, _ast.Initial, _ast.AnyValue)):
            return frozenset()
        if isinstance(value, _ast.Operator):
            widthwise = frozenset().union(*(self.value(operand) for operand in value.operands))
            if value.operator in TESTS:
                return frozenset()
            if value.operator in NUMERIC or value.operator == "u" and not value.operands[0].shape().signed:
                return widthwise
            self.spoil(widthwise)
            return frozenset()
        if isinstance(value, _ast.Slice):
            widthwise = self.value(value.value)
            narrowed = self.narrowed.get(id(value.value))
            if narrowed is not None:
                narrowed.spoiled.update(n for n, width in narrowed.widths.items() if value.stop > width)
            else:
                self.spoil(widthwise)
            return frozenset()
        if isinstance(value, _ast.Part):
            self.spoil(self.value(value.value))
            self.value(value.offset)                # an offset is a number
            return frozenset()
        if isinstance(value, _ast.Concat):
            parts = [self.value(part) for part in value.parts]
            for widthwise in parts[:-1]:
                self.spoil(widthwise)
            return parts[-1] if parts else frozenset()
        if isinstance(value, _ast.SwitchValue):
            self.test(value.test, [patterns for patterns, _ in value.cases])
            return frozenset().union(*(self.value(case) for _, case in value.cases))
        self.spoil(id(s) for s in value._rhs_signals() if id(s) in self.narrowed)
        return frozenset()


class _Sink:
    """What ``m.d`` is while a forced mutant's dropped assignment runs: every ``m.d.<domain> += ...`` is lost."""

    def __getattr__(self, name):
        return self

    def __setattr__(self, name, value):
        pass

    def __iadd__(self, statements):
        return self


@contextlib.contextmanager
def _dropped(m):
    d = m.d
    m.d = _Sink()
    try:
        yield
    finally:
        m.d = d


def unless(m, n):
    """The ``with`` of a dropped assignment: ``m.If`` mutant ``n - 1`` is not selected (forced: the
    assignment, or nothing when it is the forced mutant)."""
    if _forced is not None:
        return _dropped(m) if _forced + 1 == n else contextlib.nullcontext()
    if not _in_play(n):
        return contextlib.nullcontext()
    _note(n, "selected")
    return m.If(select() != n)


def static(n, original, mutated):
    """An elaboration-time value (a reset value): ``original``, with mutant ``n - 1`` recorded."""
    if _forced is not None:
        return mutated if _forced + 1 == n else original
    if not _in_play(n):
        return original
    _note(n, "same" if _same(mutated, original) else "static")
    return original


# --- the rewrite -------------------------------------------------------------------------------------

def _name(id_):
    return ast.Name(id_, ast.Load())


def _call(function, *args):
    return ast.Call(ast.Attribute(_name(NAME), function, ast.Load()), list(args), [])


def _lambda(names, body):
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], vararg=None, kwonlyargs=[],
                              kw_defaults=[], kwarg=None, defaults=[])
    return ast.Lambda(arguments, body)


def _is_site(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "site"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == NAME)


def _lazy(operand, how=True):
    """Mark ``operand``, when it is a rewritten site, as the operand of another or an assignment's value
    (``site(..., lazy=True)``), or as bound to a name read only as those (``lazy="named"``)."""
    if _is_site(operand) and not operand.keywords:
        operand.keywords.append(ast.keyword("lazy", ast.Constant(how)))


def _binds(node):
    """The names ``node`` binds (a store or delete, a parameter) or declares another scope's."""
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return node.names
    if isinstance(node, ast.arg):
        return [node.arg]
    return [node.id] if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) else []


def _lazy_names(tree):
    """Make lazy (``"named"``) each site bound to a local name that its function binds once and reads only as
    operands of other sites: the name then holds the ``Pending`` number, which each of those sites takes."""
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nodes = list(ast.walk(function))
        operands = {id(operand) for node in nodes if _is_site(node) for operand in node.args[2].elts}
        bound = {}
        for node in nodes:
            for name in _binds(node):
                bound.setdefault(name, []).append(node)
        for node in nodes:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and _is_site(node.value)):
                continue
            name = node.targets[0].id
            reads = [n for n in nodes if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
            if bound[name] == [node.targets[0]] and reads and all(id(n) in operands for n in reads):
                _lazy(node.value, "named")


def _position(node, offset):
    return (node.lineno + offset, node.col_offset), (node.end_lineno + offset, node.end_col_offset)


class _Rewriter(ast.NodeTransformer):
    """Each mutation site of ``sites`` ({(operator, start, end): mutant id}, positions in the joined text,
    ``offset`` lines before this file's first) as a run-time choice."""

    def __init__(self, sites, offset):
        self.sites, self.offset, self.used = sites, offset, set()

    def take(self, operator, node):
        n = self.sites.get((operator, *_position(node, self.offset)))
        if n is not None:
            self.used.add(n)
        return n

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            return self.generic_visit(node)
        own = self.take("cmp", node)
        consts = [self.take("const", node.left), self.take("const", node.comparators[0])]
        from tools.mutants import SWAP
        op = node.ops[0]
        node = self.generic_visit(node)
        variants = {}
        if own is not None:
            variants[own] = lambda a, b: ast.Compare(a, [SWAP[type(op)]()], [b])
        return self._site(node, (node.left, node.comparators[0]), consts, variants,
                          lambda a, b: ast.Compare(a, [op], [b]))

    def visit_BinOp(self, node):
        arith = isinstance(node.op, (ast.Add, ast.Sub))
        own = self.take("arith" if arith else "logic", node) if arith or isinstance(
            node.op, (ast.BitAnd, ast.BitOr)) else None
        consts = [self.take("const", node.left), self.take("const", node.right)] if arith else [None, None]
        op = node.op
        node = self.generic_visit(node)
        variants = {}
        if own is not None:
            swapped = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}[type(op)]
            variants[own] = lambda a, b: ast.BinOp(a, swapped(), b)
        return self._site(node, (node.left, node.right), consts, variants, lambda a, b: ast.BinOp(a, op, b))

    def _site(self, node, operands, consts, variants, build):
        """``site(lambda a, b: <node>, (left, right), {n + 1: lambda a, b: <mutant n>})``, or ``node``
        when it has no mutant."""
        for side, n in enumerate(consts):
            if n is not None:
                plus = ast.Constant(operands[side].value + 1)
                variants[n] = ((lambda a, b, plus=plus: build(plus, b)) if side == 0
                               else (lambda a, b, plus=plus: build(a, plus)))
        if not variants:
            return node
        for operand in operands:
            _lazy(operand)
        a, b = _name("_a"), _name("_b")
        table = ast.Dict([ast.Constant(n + 1) for n in variants],
                         [_lambda(("_a", "_b"), make(a, b)) for make in variants.values()])
        return ast.copy_location(_call("site", _name("m"), _lambda(("_a", "_b"), build(a, b)), ast.Tuple(list(operands),
                                                                                                 ast.Load()), table),
                                 node)

    def visit_UnaryOp(self, node):
        own = self.take("logic", node) if isinstance(node.op, ast.Invert) else None
        node = self.generic_visit(node)
        if own is None:
            return node
        _lazy(node.operand)
        x = _name("_a")
        table = ast.Dict([ast.Constant(own + 1)], [_lambda(("_a",), x)])
        return ast.copy_location(_call("site", _name("m"), _lambda(("_a",), ast.UnaryOp(ast.Invert(), x)),
                                       ast.Tuple([node.operand], ast.Load()), table), node)

    def visit_AugAssign(self, node):
        own = self.take("drop", node)
        node = self.generic_visit(node)
        if own is None:
            return node
        guard = ast.withitem(_call("unless", _name("m"), ast.Constant(own + 1)), None)
        return ast.copy_location(ast.With([guard], [node]), node)

    def visit_Call(self, node):
        """``Signal(<shape>, ...)`` whose shape holds sites: ``signal(Signal, lambda: <shape>, (their
        mutant-select values), ...)``, each of its mutants evaluated on its own (narrowing ones: choices);
        ``<target>.eq(<site>)``: ``assign(m, <target>, <site, lazy>)``; ``Const(<site>, <shape>)``: ``const(m,
        <site, lazy>, <shape>)``."""
        node = self.generic_visit(node)
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "eq" and len(node.args) == 1
                and not node.keywords and _is_site(node.args[0])):
            _lazy(node.args[0])
            return ast.copy_location(_call("assign", _name("m"), node.func.value, node.args[0]), node)
        if (isinstance(node.func, ast.Name) and node.func.id == "Const" and len(node.args) == 2
                and not node.keywords and _is_site(node.args[0])):
            _lazy(node.args[0])
            return ast.copy_location(_call("const", _name("m"), *node.args), node)
        if not (isinstance(node.func, ast.Name) and node.func.id == "Signal" and node.args):
            return node
        shape = node.args[0]
        values = [key for site in ast.walk(shape) if _is_site(site) for key in site.args[3].keys]
        if not values:
            return node
        return ast.copy_location(ast.Call(ast.Attribute(_name(NAME), "signal", ast.Load()), [
            node.func, _lambda((), shape), ast.Tuple(values, ast.Load()), *node.args[1:]], node.keywords), node)

    def visit_keyword(self, node):
        own = self.take("init", node.value) if node.arg in ("init", "reset") else None
        node = self.generic_visit(node)
        if own is None:
            return node
        node.value = _call("static", ast.Constant(own + 1), node.value,
                           ast.Constant(0 if node.value.value else 1))
        return node


def rewrite(text, mutants, offset=0):
    """The schemata source of one source file ``text`` whose first line is line ``offset + 1`` of the
    joined text its ``mutants`` (``tools.mutants.Mutant``) are numbered on; returns ``(source, ids)``:
    the ids of the mutants it holds."""
    sites = {(m.operator, m.start, m.end): m.id for m in mutants}
    tree = ast.parse(text)
    rewriter = _Rewriter(sites, offset)
    tree = rewriter.visit(tree)
    _lazy_names(tree)
    docstring = bool(tree.body) and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant)
    at = next((i + 1 for i, s in enumerate(tree.body) if isinstance(s, ast.ImportFrom) and s.module == "__future__"),
              int(docstring))
    tree.body.insert(at, ast.Import([ast.alias("tools.schemata", NAME)]))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", rewriter.used


def write(sources, mutants, root):
    """Write the schemata of ``sources`` (``tools.mutants.Sources``) and their ``mutants`` under ``root``."""
    for path, text, start in zip(sources.paths, sources.texts, sources.starts):
        (root / path).write_text(rewrite(text, mutants, start - 1)[0])
