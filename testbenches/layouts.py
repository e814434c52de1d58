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
    return _unpacker(layout)(word)


@functools.lru_cache(maxsize=None)
def _unpacker(layout):
    """``unpack`` for one layout, its offsets and widths worked out once (as ``_packer``)."""
    if isinstance(layout, data.StructLayout):
        fields = [(name, _unpacker(field.shape), field.offset) for name, field in layout]
        return lambda word: {name: inner(word >> offset) for name, inner, offset in fields}
    if isinstance(layout, data.ArrayLayout):
        bits, inner, length = width(layout.elem_shape), _unpacker(layout.elem_shape), layout.length
        return lambda word: [inner(word >> (i * bits)) for i in range(length)]
    shape = Shape.cast(layout)
    mask, sign = (1 << shape.width) - 1, (1 << (shape.width - 1)) if shape.signed else 0

    def plain(word):
        value = word & mask
        return value - (sign << 1) if value & sign else value
    return plain


def expect(layout, value):
    """``(word, mask)`` of an expected ``value``: the bits it names (every bit of a plain value, the
    fields present in a dict, ``Masked``'s mask)."""
    if isinstance(value, Masked):
        ones = (1 << width(layout)) - 1
        return value.value & value.mask & ones, value.mask & ones
    if isinstance(layout, data.StructLayout):
        word = mask = 0
        for name, field in layout:
            if name in value:
                w, m = expect(field.shape, value[name])
                word, mask = word | w << field.offset, mask | m << field.offset
        return word, mask
    if isinstance(layout, data.ArrayLayout):
        bits, word, mask = width(layout.elem_shape), 0, 0
        for i, v in enumerate(value):
            w, m = expect(layout.elem_shape, v)
            word, mask = word | w << (i * bits), mask | m << (i * bits)
        return word, mask
    return pack(layout, value), (1 << width(layout)) - 1
