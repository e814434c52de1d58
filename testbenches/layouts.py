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


@functools.lru_cache(maxsize=None)
def width(shape):
    """Bits of a layout or shape."""
    return shape.size if isinstance(shape, data.Layout) else Shape.cast(shape).width


def pack(layout, value):
    """Pack a (nested) dict / list / int ``value`` into the integer of ``layout``'s bits."""
    return _packer(layout)(value)


@functools.lru_cache(maxsize=None)
def _packer(layout):
    """``pack`` for one layout, its offsets and widths worked out once (the checked engine and the
    soak pack ~10^5 beats a run)."""
    if isinstance(layout, data.StructLayout):
        fields = [(name, _packer(field.shape), field.offset) for name, field in layout]

        def struct(value):
            word = 0
            for name, inner, offset in fields:
                if name in value:
                    word |= inner(value[name]) << offset
            return word
        return struct
    if isinstance(layout, data.ArrayLayout):
        bits, inner = width(layout.elem_shape), _packer(layout.elem_shape)
        return lambda value: sum(inner(v) << (i * bits) for i, v in enumerate(value))
    mask = (1 << width(layout)) - 1
    return lambda value: int(value) & mask


def unpack(layout, word):
    """Unpack the integer ``word`` into a (nested) dict / list / int following ``layout``."""
    return unpacker(layout)(word)


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
    return expecter(layout)(value)


@functools.lru_cache(maxsize=None)
def expecter(layout):
    """``expect`` for one layout, worked out once."""
    ones = (1 << width(layout)) - 1
    if isinstance(layout, data.StructLayout):
        fields = [(name, expecter(field.shape), field.offset) for name, field in layout]

        def struct(value):
            if isinstance(value, Masked):
                return value.value & value.mask & ones, value.mask & ones
            word = mask = 0
            for name, inner, offset in fields:
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
