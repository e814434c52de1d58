"""A window of a waveform as a timing diagram: WaveDrom JSON rendered to SVG (the ``wavedrom`` package).

    python -m tools.waves dump.vcd i__valid i__ready o__valid o__payload --start 100 --rows 30 --svg out.svg

One lane per chosen signal, sampled like ``tools.waves`` tables (just before each rising clock edge);
a signal with struct fields in the waveform (Amaranth's ``o__payload.port`` ...) becomes a group of
one lane per field, named by the field. Every multi-bit lane names its radix: ``(hex)`` for data,
keep, bitmap and header fields, ``(dec)`` otherwise; one-bit lanes are drawn as levels. Long hex
values are cut to their first 8 digits (``…``).
"""
import json
from pathlib import Path

from tools.waves import window

HEX_WORDS = ("data", "keep", "bitmap", "header", "mask", "addr", "imm")
HEX_DIGITS = 8


def is_hex(name):
    leaf = name.rsplit(".", 1)[-1].split("__")[-1]
    return any(word in leaf for word in HEX_WORDS) or leaf == "payload"


def label(value, width, hexadecimal):
    """A lane's text for ``value`` (``None`` / a string with x or z: unknown)."""
    if value is None or (isinstance(value, str) and not set(value) <= {"0", "1"}):
        return None
    value = int(value, 2) if isinstance(value, str) else value
    if not hexadecimal:
        return str(value)
    digits = f"{value:0{(width + 3) // 4}x}"
    return "0x" + (digits[:HEX_DIGITS] + "…" if len(digits) > HEX_DIGITS else digits)


def lane(name, samples, width):
    """A WaveDrom lane: levels for one bit, labelled data for more."""
    wave, data, last = [], [], object()
    hexadecimal = is_hex(name)
    for value in samples:
        text = label(value, width, hexadecimal)
        if width == 1:
            char = "x" if text is None else text
        else:
            char = "x" if text is None else "="
        if (char, text) == last:
            wave.append(".")
            continue
        last = (char, text)
        wave.append(char)
        if char == "=":
            data.append(text)
    out = {"name": f"{name} ({'hex' if hexadecimal else 'dec'})" if width > 1 else name, "wave": "".join(wave)}
    if data:
        out["data"] = data
    return out


def diagram(wave, patterns=(), clock="clk", start=0, rows=40):
    """The WaveDrom JSON (a dict) of the signals matching ``patterns`` over cycles ``start..start+rows``
    (``tools.waves.window``: a pattern matching nothing is an error)."""
    variables, chosen, times = window(wave, patterns, clock, start, rows)

    def samples(full):
        signal = variables[full][1].signal
        return [signal.value_at(t - 1) for t in times]

    signal = [{"name": "clk", "wave": "p" + "." * (len(times) - 1)}]
    for full in chosen:
        short, var = variables[full]
        fields = [n for n in variables if n.startswith(full + ".")]
        leaves = [n for n in fields if not any(m.startswith(n + ".") for m in fields)]
        if var.bitwidth > 1 and leaves:
            group = [short]
            for leaf in sorted(leaves):
                group.append(lane(leaf[len(full) + 1:], samples(leaf), variables[leaf][1].bitwidth))
            signal.append(group)
        else:
            signal.append(lane(short, samples(full), var.bitwidth))
    return {"signal": signal, "head": {"text": f"cycles {start}..{start + len(times) - 1}", "tick": start},
            "config": {"hscale": 1}}


def render(source, out):
    """Write the SVG of WaveDrom JSON ``source`` (a dict) to ``out``; return the path."""
    import wavedrom

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    wavedrom.render(json.dumps(source)).saveas(str(out))
    return out
