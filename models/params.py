"""Typed, frozen parameter objects: one class per block, validated here and nowhere else.

A block's parameters are a keyword-only frozen dataclass derived from ``Params``. Each field is
declared with ``param(default, ...)`` (its type, range, allowed values, and a one-line doc); the
checks run on construction and raise ``TypeError`` (wrong type) or ``ValueError`` (out of range),
naming the class, the parameter, its value and what is allowed. Constraints between fields go in
the class's ``validate``. The RTL Component and its golden model take the same object; nested
objects (the pipeline's stages) are fields of type ``Params``.
"""
import dataclasses
from dataclasses import dataclass, field

__all__ = ["Params", "param", "check"]


def param(default, *, lo=None, hi=None, choices=None, pow2=False, doc=""):
    """A parameter field: ``default`` also fixes the type (int, bool, str or a ``Params``)."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "choices": choices, "pow2": pow2,
                                            "kind": type(default), "doc": doc})


def _allowed(meta):
    parts = []
    if meta["choices"] is not None:
        parts.append("one of " + ", ".join(repr(c) for c in meta["choices"]))
    if meta["lo"] is not None or meta["hi"] is not None:
        lo = "" if meta["lo"] is None else meta["lo"]
        hi = "" if meta["hi"] is None else meta["hi"]
        parts.append(f"in {lo}..{hi}")
    if meta["pow2"]:
        parts.append("a power of two")
    return " and ".join(parts) or "valid"


@dataclass(frozen=True, kw_only=True)
class Params:
    """Base of every block's parameters: field checks, cross-field ``validate``, dict round trip."""

    def __post_init__(self):
        name = type(self).__name__
        for f in dataclasses.fields(self):
            value, meta = getattr(self, f.name), f.metadata
            kind = meta.get("kind", object)
            ok = (isinstance(value, kind) and not (kind is int and isinstance(value, bool)))
            if not ok:
                raise TypeError(f"{name}.{f.name}: expected {kind.__name__}, got "
                                f"{type(value).__name__} {value!r}")
            if kind is int or kind is str:
                bad = ((meta["choices"] is not None and value not in meta["choices"])
                       or (meta["lo"] is not None and value < meta["lo"])
                       or (meta["hi"] is not None and value > meta["hi"])
                       or (meta["pow2"] and (value < 1 or value & (value - 1))))
                if bad:
                    raise ValueError(f"{name}.{f.name} = {value!r}: must be {_allowed(meta)}")
        self.validate()

    def validate(self):
        """Constraints between fields; raise ``ValueError`` naming the parameters."""

    def fail(self, message):
        """Raise the ``ValueError`` of a cross-field constraint of this class."""
        raise ValueError(f"{type(self).__name__}: {message}")

    def replace(self, **changes):
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self):
        """Plain nested dict (JSON-ready) of every parameter."""
        return {f.name: (v.as_dict() if isinstance(v, Params) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    @classmethod
    def from_dict(cls, values):
        """Inverse of ``as_dict``; unknown keys raise ``TypeError`` naming them."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(values) - set(fields)
        if unknown:
            raise TypeError(f"{cls.__name__}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                            f"known: {', '.join(fields)}")
        kwargs = {}
        for key, value in values.items():
            kind = fields[key].metadata.get("kind")
            kwargs[key] = kind.from_dict(value) if isinstance(value, dict) and issubclass(kind, Params) \
                else value
        return cls(**kwargs)

    def flat(self, prefix=""):
        """``{"name": value}`` with nested objects' fields under ``"<field>.<name>"``."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Params):
                out.update(value.flat(f"{prefix}{f.name}."))
            else:
                out[prefix + f.name] = value
        return out

    @classmethod
    def describe(cls):
        """``[(name, default, allowed, doc)]`` of every parameter (for docs and CLIs)."""
        return [(f.name, f.default, _allowed(f.metadata), f.metadata.get("doc", ""))
                for f in dataclasses.fields(cls)]


def check(params, cls):
    """``params`` if it is a ``cls`` (``None`` gives the defaults); else ``TypeError``."""
    if params is None:
        return cls()
    if not isinstance(params, cls):
        raise TypeError(f"params: expected {cls.__name__}, got {type(params).__name__} {params!r}")
    return params
