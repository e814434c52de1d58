"""The GTKWave save file (``tools/gtkw.py``) and the timing diagram (``tools/timing.py``) of a waveform
laid out as Verilator writes an Amaranth design: the ports in ``$rootio`` and again in ``top``, with
the struct fields (``i__payload.data``) and array elements (``qdepth.[0]``) Amaranth adds in ``top``.
The runner writes a save file beside every real waveform; ``test_readme`` checks the one of `make sim`.
"""
import json
import re
import xml.etree.ElementTree as ElementTree

import pytest

from testbenches.test_cli import fails
from tools import gtkw, timing
from tools.waves import load

#: (name, width) of the ports in both scopes, then the fields Amaranth adds in ``top``.
PORTS = [("clk", 1), ("rst", 1), ("i__valid", 1), ("i__ready", 1), ("i__payload", 13), ("o__valid", 1),
         ("o__payload", 9), ("qdepth", 8), ("forwarded", 16)]
FIELDS = [("i__payload.data", 8), ("i__payload.last", 1), ("i__payload.meta", 4), ("i__payload.meta.port", 4),
          ("o__payload.port", 8), ("o__payload.spilled", 1), ("qdepth.[0]", 4), ("qdepth.[1]", 4),
          ("core.state", 3), ("$auto$verilog_backend_cc_2355_dump_module$1", 1)]


def vcd_text(cycles=8):
    """The VCD: every signal ``name`` of width ``w`` holds ``(3 * cycle + len(name)) % 2**w`` from the
    falling clock edge of each cycle (``clk`` rises at odd nanoseconds)."""
    widths = dict(PORTS + FIELDS)
    ids = {name: f"s{n}" for n, name in enumerate(widths)}

    def var(name, leaf):
        width = widths[name]
        leaf = leaf.replace(".[", "[")      # Verilator writes an array element as `qdepth[0] [3:0]`
        return f"  $var wire {width} {ids[name]} {leaf}{f' [{width - 1}:0]' if width > 1 else ''} $end"

    lines = ["$timescale 1ps $end", " $scope module $rootio $end"]
    lines += [var(name, name) for name, _ in PORTS]
    lines += [" $upscope $end", " $scope module top $end"]
    lines += [var(name, name) for name, _ in PORTS + FIELDS if not name.startswith("core.")]
    lines += ["  $scope module core $end", var("core.state", "state"), "  $upscope $end", " $upscope $end",
              "$enddefinitions $end"]
    for t in range(2 * cycles + 1):
        lines.append(f"#{t * 1000}")
        for name, sid in ids.items():
            if name == "clk":
                value = t % 2
            elif t % 2:
                continue
            else:
                value = (t // 2 * 3 + len(name)) % (1 << widths[name])
            lines.append(f"{value}{sid}" if widths[name] == 1 else f"b{value:b} {sid}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    path = tmp_path_factory.mktemp("views") / "dump.vcd"
    path.write_text(vcd_text())
    return path


def test_gtkw_layout(dump):
    saved = gtkw.write(dump)
    assert saved == dump.with_suffix(".gtkw")
    text = saved.read_text()
    assert gtkw.signals(saved) == [
        "top.clk", "top.rst",
        "top.i__valid", "top.i__ready", "top.i__payload[12:0]",
        "top.\\i__payload.data[7:0]", "top.\\i__payload.last", "top.\\i__payload.meta[3:0]",
        "top.\\i__payload.meta.port[3:0]",
        "top.o__valid", "top.o__payload[8:0]", "top.\\o__payload.port[7:0]", "top.\\o__payload.spilled",
        "top.qdepth[7:0]", "top.qdepth[0][3:0]", "top.qdepth[1][3:0]", "top.forwarded[15:0]"]
    groups = [line[1:] for line in text.splitlines() if line.startswith("-")]
    assert groups == ["i", "i__payload fields", "i__payload fields", "i", "o", "o__payload fields",
                      "o__payload fields", "o", "other ports", "qdepth fields", "qdepth fields", "other ports"]
    # radix flags: data hex, port decimal, one-bit binary
    lines = text.splitlines()
    flag = {name: next(lines[j] for j in range(i, -1, -1) if lines[j].startswith("@"))
            for i, name in enumerate(lines) if name[:1] not in "[@-*"}
    assert flag["top.\\i__payload.data[7:0]"] == gtkw.HEX and flag["top.\\o__payload.port[7:0]"] == gtkw.DEC
    assert flag["top.\\o__payload.spilled"] == gtkw.BIN
    assert gtkw.missing(saved, dump) == []


def quiet_vcd(cycles, rises):
    """A VCD of ``cycles`` cycles (``clk`` rises at odd nanoseconds) whose stream valids ``rises``
    (``{port: cycle}``) go high just after the rising edge of the cycle before (so the edge of that
    cycle samples them high) and stay high."""
    ports = ["clk", "i__valid", "o__valid", "spill_o__valid"]
    lines = ["$timescale 1ps $end"]
    for scope in ("$rootio", "top"):
        lines += [f" $scope module {scope} $end", *(f"  $var wire 1 {p} {p} $end" for p in ports), " $upscope $end"]
    lines += ["$enddefinitions $end", "#0", *(f"0{p}" for p in ports)]
    for t in range(1, 2 * cycles + 1):
        lines.append(f"#{t * 1000}")
        lines.append(f"{t % 2}clk")
        lines += [f"1{p}" for p, cycle in rises.items() if t == 2 * cycle]
    return "\n".join(lines) + "\n"


def test_gtkw_opens_on_first_window(tmp_path):
    """The save file opens on the first beats of the streams, zoomed to fill the wave pane (it opened
    on 0-5 ps of a run thousands of cycles long: every trace looked flat)."""
    path = tmp_path / "dump.vcd"
    path.write_text(quiet_vcd(2000, {"i__valid": 400, "o__valid": 420, "spill_o__valid": 470}))
    text = gtkw.text(path, load(path))
    edge = lambda cycle: 1000 + 2000 * cycle       # noqa: E731 (the rising edge of a cycle, in ps)
    start = int(re.search(r"^\[timestart\] (\d+)$", text, re.M).group(1))
    assert start == edge(400 - gtkw.BEFORE), text[:400]
    zoom = float(re.search(r"^\*(-?[\d.]+) -1( -1){26}$", text, re.M).group(1))
    span = gtkw.WAVE_PIXELS / 2 ** zoom          # GTKWave: 2**zoom pixels per time unit
    assert span == pytest.approx(edge(470 + gtkw.AFTER) - start), (zoom, span)
    path.write_text(quiet_vcd(100, {}))                 # nothing happens: zoomed to fit
    text = gtkw.text(path, load(path))
    zoom = float(re.search(r"^\*(-?[\d.]+) ", text, re.M).group(1))
    assert "[timestart] 1000" in text and gtkw.WAVE_PIXELS / 2 ** zoom == pytest.approx(edge(99) - edge(0))


def test_gtkw_missing_is_caught(dump, tmp_path):
    """A save file naming a signal the dump lacks, or with the wrong width, is reported."""
    text = gtkw.text(dump, load(dump))
    broken = tmp_path / "broken.gtkw"
    broken.write_text(text.replace("top.\\i__payload.data[7:0]", "top.\\i__payload.data[8:0]")
                      .replace("top.qdepth[1][3:0]", "top.qdepth[2][3:0]"))
    assert gtkw.missing(broken, dump) == ["top.\\i__payload.data[8:0]", "top.qdepth[2][3:0]"]
    assert gtkw.missing(gtkw.write(dump, tmp_path / "good.gtkw"), dump) == []


def test_timing_diagram(dump, tmp_path):
    source = timing.diagram(load(dump), ["i__valid", "i__payload", "qdepth"], start=2, rows=4)
    lanes = source["signal"]
    assert lanes[0] == {"name": "clk", "wave": "p..."}
    assert lanes[1]["name"] == "i__valid" and len(lanes[1]["wave"]) == 4
    payload = lanes[2]
    assert payload[0] == "i__payload"
    fields = {lane["name"]: lane for lane in payload[1:]}
    assert set(fields) == {"data (hex)", "last", "meta.port (dec)"}   # leaves only: meta has a field
    # values sampled just before the rising edge of cycles 2..5 (times 5000, 7000, ...): see vcd_text
    data = [(t * 3 + len("i__payload.data")) % 256 for t in (2, 3, 4, 5)]
    assert fields["data (hex)"]["data"] == [f"0x{v:02x}" for v in data]
    assert fields["data (hex)"]["wave"] == "===="
    assert [lane["name"] for lane in lanes[3][1:]] == ["[0] (dec)", "[1] (dec)"]
    svg = timing.render(source, tmp_path / "w.svg")
    root = ElementTree.parse(svg).getroot()
    texts = {"".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {"data (hex)", "meta.port (dec)", "i__valid"} <= texts, sorted(texts)
    json.dumps(source)      # plain JSON: `wavedrom` (or the WaveDrom editor) renders it as is


def test_cli_bad_input(dump, tmp_path):
    assert "No such file" in fails("gtkw", str(tmp_path / "nosuch.vcd"))
    assert "no signal matches nosuch" in fails("waves", str(dump), "nosuch", "--svg", str(tmp_path / "w.svg"))
