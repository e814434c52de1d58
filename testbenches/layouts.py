"""Amaranth layouts <-> Python values: the one translation between the RTL's bits and the models' dicts.

``pack(layout, value)`` and ``unpack(layout, word)`` convert a (nested) dict / list / int; ``expect(layout,
value)`` also gives the mask of the bits a model's expected value names (a field left out of a dict is
not compared; ``models.contract.Masked`` compares part of one field).
"""
import functools

from amaranth.hdl import Shape
from amaranth.lib import data

from models.contract import Masked

__all__ = ["pack", "unpack", "expect", "width"]

#: Layout objects whose packer, unpacker and expecter are kept by identity (``_per_layout``).
KEPT = 1024


@functools.lru_cache(maxsize=None)
def width(shape):
    """Bits of a layout or shape."""
    return shape.size if isinstance(shape, data.Layout) else Shape.cast(shape).width


def _per_layout(make):
    """``make(layout)`` kept per layout object: a lookup by the layout's own hash and ``==`` walks its fields,
    which a call per beat of every port cannot afford (the ``functools.lru_cache`` below, which nested
    layouts share, is reached once per layout object)."""
    made = {}

    def get(layout):
        entry = made.get(id(layout))
        if entry is None:
            if len(made) >= KEPT:           # layouts made per call (not a port's own) are not all kept
                made.clear()
            entry = made[id(layout)] = (layout, make(layout))       # the layout kept: its id stays its own
        return entry[1]
    return get


def pack(layout, value):
    """Pack a (nested) dict / list / int ``value`` into the integer of ``layout``'s bits."""
    return _packer_of(layout)(value)


@functools.lru_cache(maxsize=None)
def _packer(layout):
    """``pack`` for one layout, its offsets and widths worked out once (the checked engine and the
    soak pack ~10^5 beats a run)."""
    if isinstance(layout, data.StructLayout):            # plain fields packed inline: no call per field
        plain = [(name, field.offset, _ones(field.shape)) for name, field in layout if _plain(field.shape)]
        nested = [(name, _packer(field.shape), field.offset) for name, field in layout if not _plain(field.shape)]

        def struct(value):
            word = 0
            for name, offset, mask in plain:
                if name in value:
                    word |= (int(value[name]) & mask) << offset
            for name, inner, offset in nested:
                if name in value:
                    word |= inner(value[name]) << offset
            return word
        return struct
    if isinstance(layout, data.ArrayLayout):
        bits = width(layout.elem_shape)
        if _plain(layout.elem_shape):
            mask = _ones(layout.elem_shape)

            def plain_array(value):
                word = shift = 0
                for v in value:
                    word += (int(v) & mask) << shift
                    shift += bits
                return word
            return plain_array
        inner = _packer(layout.elem_shape)

        def array(value):
            word = shift = 0
            for v in value:
                word += inner(v) << shift
                shift += bits
            return word
        return array
    mask = _ones(layout)
    return lambda value: int(value) & mask


def _plain(shape):
    """Whether ``pack`` takes ``shape``'s value as one integer (not a struct or array of fields)."""
    return not isinstance(shape, (data.StructLayout, data.ArrayLayout))


def _ones(shape):
    """Every bit of ``shape``."""
    return (1 << width(shape)) - 1


def unpack(layout, word):
    """Unpack the integer ``word`` into a (nested) dict / list / int following ``layout``."""
    return _unpacker_of(layout)(word)


@functools.lru_cache(maxsize=None)
def unpacker(layout):
    """``unpack`` for one layout, worked out once (the lockstep unpacks every port of every cycle)."""
    if isinstance(layout, data.StructLayout):
        fields = [(name, unpacker(field.shape), field.offset) for name, field in layout]
        return lambda word: {name: inner(word >> offset) for name, inner, offset in fields}
    if isinstance(layout, data.ArrayLayout):
        bits, inner, count = width(layout.elem_shape), unpacker(layout.elem_shape), layout.length
        return lambda word: [inner(word >> (i * bits)) for i in range(count)]
    shape = Shape.cast(layout)
    mask, top = (1 << shape.width) - 1, 1 << shape.width
    if shape.signed:
        return lambda word: (word & mask) - top if (word & mask) >> (shape.width - 1) else word & mask
    return lambda word: word & mask


def expect(layout, value):
    """``(word, mask)`` of an expected ``value``: the bits it names (every bit of a plain value, the
    fields present in a dict, ``Masked``'s mask)."""
    return _expecter_of(layout)(value)


@functools.lru_cache(maxsize=None)
def expecter(layout):
    """``expect`` for one layout, worked out once."""
    ones = (1 << width(layout)) - 1
    if isinstance(layout, data.StructLayout):            # plain fields worked out inline: no call per field
        plain = [(name, field.offset, _ones(field.shape)) for name, field in layout if _plain(field.shape)]
        nested = [(name, expecter(field.shape), field.offset) for name, field in layout if not _plain(field.shape)]

        def struct(value):
            if isinstance(value, Masked):
                return value.value & value.mask & ones, value.mask & ones
            word = mask = 0
            for name, offset, named in plain:
                if name in value:
                    v = value[name]
                    if isinstance(v, Masked):
                        v, named = v.value, named & v.mask
                    word, mask = word | (int(v) & named) << offset, mask | named << offset
            for name, inner, offset in nested:
                if name in value:
                    w, m = inner(value[name])
                    word, mask = word | w << offset, mask | m << offset
            return word, mask
        return struct
    if isinstance(layout, data.ArrayLayout):
        bits, inner = width(layout.elem_shape), expecter(layout.elem_shape)

        def array(value):
            if isinstance(value, Masked):
                return value.value & value.mask & ones, value.mask & ones
            word = mask = 0
            for i, v in enumerate(value):
                w, m = inner(v)
                word, mask = word | w << (i * bits), mask | m << (i * bits)
            return word, mask
        return array

    def plain(value):
        if isinstance(value, Masked):
            return value.value & value.mask & ones, value.mask & ones
        return int(value) & ones, ones
    return plain


_packer_of, _unpacker_of, _expecter_of = _per_layout(_packer), _per_layout(unpacker), _per_layout(expecter)
