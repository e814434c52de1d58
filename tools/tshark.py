"""Decode pcaps with Wireshark's tshark and innet's Lua dissectors; check every field against scapy.

    python -m tools.tshark build/spillway.top/<params>/random_traffic/in.pcap
    python -m tools.tshark build/                  # every pcap under build/
    python -m tools.tshark --strict a.pcap         # also fail on DNS, malformed or unknown frames

The dissectors (``tools/wireshark/*.lua``: INA on UDP 48864, DBLP on UDP 48872, the spill shim on
EtherType 0x88B5) name their fields as the scapy layers of ``models/headers.py`` do
(``ina.jobseq``, ``dblp.round``, ``spill.seq``, ...). For every packet, each field of every innet
shim and of the RoCEv2 BTH/RETH/ImmDt (Wireshark's own InfiniBand dissector) that scapy decodes
must be decoded by tshark with the same value, and tshark must decode no shim field that scapy does
not. The RPC-over-RDMA and SMB Direct heuristics are disabled (``HEURISTICS_OFF``): on RoCE SENDs with
a few bytes of payload, as the single-beat test packets are, they claim the packet and report it
malformed. A file's DNS and malformed frames are counted (bad-input tests write malformed packets on
purpose); ``--strict`` fails on them too.
"""
import json
import shutil
import subprocess
from pathlib import Path

from scapy.contrib.roce import BTH
from scapy.error import Scapy_Exception
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapReader

from models import wire
from models.headers import DBLP, INA, RETH, UDP, ImmDt, Raw, Spill
from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
LUA = sorted((ROOT / "tools" / "wireshark").glob("*.lua"))
#: Heuristic sub-dissectors of InfiniBand payloads that misread short SEND payloads.
HEURISTICS_OFF = ("rpcrdma_infiniband", "smb_direct_infiniband")

#: scapy layer -> (tshark field prefix or mapping of scapy field -> tshark field).
SHIMS = {INA: "ina", DBLP: "dblp", Spill: "spill"}
NATIVE = {
    BTH: {"opcode": "infiniband.bth.opcode", "solicited": "infiniband.bth.se", "migreq": "infiniband.bth.m",
          "padcount": "infiniband.bth.padcnt", "version": "infiniband.bth.tver", "pkey": "infiniband.bth.p_key",
          "dqpn": "infiniband.bth.destqp", "ackreq": "infiniband.bth.a", "psn": "infiniband.bth.psn"},
    RETH: {"va": "infiniband.reth.va", "rkey": "infiniband.reth.r_key", "dlen": "infiniband.reth.dmalen"},
    ImmDt: {"imm": "infiniband.immdt"},
}


#: ``_ws.expert.group`` of a malformed-packet note (PI_MALFORMED).
MALFORMED = str(0x07000000)


def tshark():
    """The path of ``tshark``, or ``None``."""
    return shutil.which("tshark")


def command(pcap, *extra):
    """The tshark command decoding ``pcap`` with innet's dissectors."""
    args = ["tshark", "-n", "-r", str(pcap)]
    for script in LUA:
        args += ["-X", f"lua_script:{script}"]
    for name in HEURISTICS_OFF:
        args += ["--disable-heuristic", name]
    return args + list(extra)


def decode(pcap):
    """tshark's layers of every packet of ``pcap`` (``-T json``, repeated keys merged into lists)."""
    if not tshark():
        raise OSError("tshark is not installed (tools/setup.sh installs Debian's tshark when run as root)")
    result = subprocess.run(command(pcap, "-T", "json", "--no-duplicate-keys"), capture_output=True, text=True)
    errors = [line for line in result.stderr.splitlines() if "Running as user" not in line and line.strip()]
    if result.returncode or errors:
        raise ValueError(f"tshark on {pcap} failed ({result.returncode}): {' '.join(errors)[:500]}")
    return [p["_source"]["layers"] for p in json.loads(result.stdout or "[]")]


def flatten(tree, out=None):
    """``{field: [values...]}`` of every field in a tshark JSON tree, in packet order."""
    out = {} if out is None else out
    for key, value in tree.items():
        if isinstance(tree.get(f"{key}_tree"), dict) and key in tree[f"{key}_tree"]:
            continue        # a header shown as bytes whose tree repeats it (infiniband.immdt)
        else:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    flatten(item, out)
                else:
                    out.setdefault(key, []).append(item)
    return out


def number(text):
    """A tshark value as an integer: decimal, ``0x`` hex, or ``aa:bb:..`` bytes (big-endian)."""
    if ":" in text:
        return int(text.replace(":", ""), 16)
    return int(text, 0)


def expected(packet):
    """``{tshark field: [values...]}`` scapy decodes in ``packet`` for the checked layers."""
    out = {}
    layer = packet
    while layer is not None and layer.__class__.__name__ != "NoPayload":
        cls = type(layer)
        if cls in SHIMS:
            for field in cls.fields_desc:
                value = layer.getfieldval(field.name)
                out.setdefault(f"{SHIMS[cls]}.{field.name}", []).extend(value if isinstance(value, list) else [value])
        elif cls in NATIVE:
            for name, key in NATIVE[cls].items():
                out.setdefault(key, []).append(layer.getfieldval(name))
        layer = layer.payload if layer.payload else None
    return out


#: Every tshark field compared: the shims' fields under scapy's names, the native ones mapped.
CHECKED = ({f"{prefix}.{field.name}" for cls, prefix in SHIMS.items() for field in cls.fields_desc}
           | {key for fields in NATIVE.values() for key in fields.values()})


def check(pcap):
    """Compare tshark's decoding of ``pcap`` with scapy's, packet by packet.

    Returns ``{"packets", "fields", "protocols": {protocol: packets holding it}, "dns", "malformed",
    "mismatches": [text...]}``; ``fields`` counts the field values compared. A frame tshark finds
    malformed (or with an expert note of the malformed group) or scapy cannot decode (``gave_up``) is counted in
    ``malformed`` and not compared: bad-input tests write such frames on purpose.
    """
    try:
        raws = [raw for raw, _ in RawPcapReader(str(pcap))]
    except Scapy_Exception as error:
        raise ValueError(f"{pcap}: {error}") from None
    layers = decode(pcap)
    if len(layers) != len(raws):
        raise ValueError(f"{pcap}: tshark decoded {len(layers)} packets, scapy read {len(raws)}")
    report = {"packets": len(raws), "fields": 0, "protocols": {}, "dns": 0, "malformed": 0, "mismatches": []}
    for index, (raw, tree) in enumerate(zip(raws, layers), 1):
        protocols = tree["frame"]["frame.protocols"].split(":")
        for name in dict.fromkeys(protocols):
            report["protocols"][name] = report["protocols"].get(name, 0) + 1
        report["dns"] += "dns" in protocols
        fields = flatten(tree)
        try:
            frame = Ether(raw)
        except Exception:       # scapy gives up on some truncated headers
            frame = None
        bad = "_ws.malformed" in fields or MALFORMED in fields.get("_ws.expert.group", [])
        if frame is None or bad or gave_up(frame):
            report["malformed"] += 1        # a bad-input packet: counted, not compared
            continue
        got = {k: v for k, v in fields.items() if k in CHECKED}
        want = expected(frame)
        for key in sorted(set(got) | set(want)):
            values = [number(v) for v in got.get(key, [])]
            if values != want.get(key, []):
                report["mismatches"].append(f"{pcap} packet {index} ({frame.summary()}): {key} is "
                                            f"{values or 'absent'} in tshark, {want.get(key) or 'absent'} in scapy")
            report["fields"] += len(values)
    return report


#: UDP ports and EtherTypes scapy binds a checked layer to.
BOUND_PORTS = (wire.ROCEV2_PORT, wire.INA_PORT, wire.DBLP_PORT)


def gave_up(frame):
    """Whether scapy left a checked layer as raw bytes: too short for it (a BTH without room for
    the ICRC, a truncated shim), so scapy and tshark cannot be compared field by field."""
    layer = frame
    while layer is not None and layer.__class__.__name__ != "NoPayload":
        if isinstance(layer.payload, Raw) and (
                (isinstance(layer, UDP) and layer.dport in BOUND_PORTS)
                or (isinstance(layer, Ether) and layer.type == wire.ETHERTYPE_SPILL)):
            return True
        layer = layer.payload if layer.payload else None
    return False


def pcaps(paths):
    """The pcap files named by ``paths`` (files, or directories searched recursively)."""
    found = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(path.rglob("*.pcap"))
        elif path.exists():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return found


def main(argv=None):
    parser = Parser(prog="tshark", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="pcap files or directories holding them")
    parser.add_argument("--strict", action="store_true", help="also fail on DNS and malformed frames")
    args = parser.parse_args(argv)
    files = pcaps(args.paths)
    if not files:
        raise ValueError(f"no .pcap under {' '.join(args.paths)}")
    failed = []
    print(f"{'packets':>8} {'fields':>8} {'dns':>4} {'malformed':>9} {'mismatch':>8}  file: protocols")
    for pcap in files:
        r = check(pcap)
        tops = ", ".join(f"{k} {v}" for k, v in sorted(r["protocols"].items(), key=lambda kv: -kv[1])
                         if k not in ("eth", "ethertype", "ip", "ipv6", "udp"))
        print(f"{r['packets']:8} {r['fields']:8} {r['dns']:4} {r['malformed']:9} {len(r['mismatches']):8}  "
              f"{pcap}: {tops}")
        failed += r["mismatches"]
        if args.strict and (r["dns"] or r["malformed"]):
            failed.append(f"{pcap}: {r['dns']} DNS and {r['malformed']} malformed frames (--strict)")
    for line in failed[:20]:
        print(line)
    if failed:
        raise ValueError(f"{len(failed)} mismatches (first {min(len(failed), 20)} above)")


if __name__ == "__main__":
    run("tshark", main)
