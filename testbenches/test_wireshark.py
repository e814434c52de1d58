"""Wireshark's tshark with innet's Lua dissectors (``tools/wireshark/``) decodes every innet shim as
scapy does: every field of every packet, on a pcap of every shim (INA, DBLP, spill DATA/RETURN/DRAIN
carrying each kind of frame) and of the RoCEv2 headers the blocks read (BTH, RETH, ImmDt: Wireshark's
own dissector), with edge and random field values; no packet decodes as DNS or malformed.

tshark is Debian's (``tools/setup.sh`` installs it when run as root). Without it the tests fail when
run as root (setup should have installed it) and are skipped with the reason otherwise.
"""
import os
import re
import shutil

import pytest
from scapy.utils import wrpcap

from models import wire
from models.headers import (
    RC_SEND_LAST,
    RC_SEND_MIDDLE,
    RC_SEND_ONLY,
    dblp_packet,
    drain_request,
    ina_packet,
    mrc_packet,
    roce_packet,
    sdr_packet,
    spill_frame,
)
from testbenches.runner import model_rng
from testbenches.test_cli import cli, fails
from tools import tshark


@pytest.fixture(autouse=True)
def need_tshark():
    if tshark.tshark():
        return
    if os.geteuid() == 0:
        pytest.fail("tshark is missing although this runs as root: tools/setup.sh (make setup) installs it")
    pytest.skip("tshark is not installed and this is not root: install Debian's tshark to run the Wireshark "
                "dissector checks")


def stimulus(rng):
    """Packets of every shim and RoCE header kind, realistic ports (ephemeral sources, RoCE on 4791),
    queue pairs 2 and up (QP 0/1 are the InfiniBand management QPs), edge and random field values."""
    def sport():
        return rng.randrange(49152, 65536)

    def qp():
        return rng.randrange(2, 1 << 24)

    packets = []
    flags = ("overflow", "resend", "collision", "ack", "evict", "result", "ecn", "resv")
    for flag in flags:                                       # each INA flag alone
        packets.append(ina_packet(worker=rng.randrange(32), jobseq=rng.randrange(1 << 32), index=rng.randrange(1 << 16),
                                  values=[rng.randrange(-2**31, 2**31) for _ in range(rng.randrange(0, 9))],
                                  **{flag: 1}))
    packets.append(ina_packet(worker=31, jobseq=(1 << 32) - 1, index=0xFFFF, fanin=255, priority=255,
                              values=[wire.INT32_MIN, wire.INT32_MAX, -1, 0], **{f: 1 for f in flags}))
    packets.append(ina_packet(values=[]))
    for _ in range(8):
        packets.append(ina_packet(worker=rng.randrange(8), jobseq=rng.randrange(1, 1 << 32),
                                  index=rng.randrange(1 << 16) | wire.INA_SET_BIT, fanin=rng.randrange(1, 9),
                                  priority=rng.randrange(256), values=[rng.randrange(-1000, 1000) for _ in range(16)]))
    for last, retx in ((0, 0), (1, 0), (0, 1), (1, 1)):
        packets.append(dblp_packet(job=rng.randrange(256), round=rng.randrange(1 << 16), idx=rng.randrange(1 << 16),
                                   cnt=rng.randrange(1, 1 << 16), phase=rng.randrange(16), last=last, retx=retx,
                                   payload=bytes(rng.randrange(0, 64)), rng=rng))
    packets.append(dblp_packet(job=255, round=0xFFFF, idx=0xFFFF, cnt=0xFFFF, phase=15, last=1, retx=1, ver=15,
                               fresv=3, resv=15, resv2=0xFFFF, rng=rng))
    for _ in range(4):
        msg, offset = rng.randrange(1 << wire.SDR_MSG_BITS), rng.randrange(1 << wire.SDR_OFFSET_BITS)
        packets.append(sdr_packet(msg, offset, gen=rng.randrange(4), channel=rng.randrange(4), user=rng.randrange(16),
                                  psn=rng.randrange(1 << 24), rkey=rng.randrange(1 << 32)))
    roce = [roce_packet(src=f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}", sport=sport(), qp=qp(),
                        psn=rng.randrange(1 << 24), op=op, payload=bytes(size))
            for op in (RC_SEND_ONLY, RC_SEND_MIDDLE, RC_SEND_LAST) for size in (0, 2, 40, 200)]
    packets += roce
    packets += [mrc_packet(ev=rng.randrange(49152, 1 << 32) | 0xC000, qp=qp(), psn=rng.randrange(1 << 24),
                           payload=bytes(rng.randrange(0, 64)), outer=outer) for outer in (True, False)]
    inner = [roce[0], ina_packet(worker=3, values=[5, -5]), dblp_packet(job=1, round=2, idx=3, cnt=4, rng=rng),
             sdr_packet(1, 2)]
    for op in (wire.SPILL_DATA, wire.SPILL_RETURN):
        for frame in inner:
            packets.append(spill_frame(frame, port=rng.randrange(256), flow=rng.randrange(1 << 16),
                                       seq=rng.randrange(1 << 16), op=op))
    packets += [drain_request(rng.randrange(256), rng.randrange(1, 256)), drain_request(255, 255)]
    return packets


@pytest.fixture(scope="module")
def pcap(tmp_path_factory):
    path = tmp_path_factory.mktemp("wireshark") / "shims.pcap"
    packets = stimulus(model_rng("wireshark"))
    wrpcap(str(path), packets)
    return path, packets


def test_dissectors_match_scapy(pcap):
    path, packets = pcap
    report = tshark.check(path)
    assert not report["mismatches"], "\n".join(report["mismatches"][:20])
    assert report["packets"] == len(packets)
    assert report["dns"] == 0 and report["malformed"] == 0, report
    protocols = report["protocols"]
    # every packet of each kind decoded as it: INA 18 + 2 spilled, DBLP 5 + 2 spilled, spill 8 frames + 2
    # drain requests, InfiniBand 4 SDR + 12 RoCE + 2 MRC + 4 spilled
    expected = {"ina": 18 + 2, "dblp": 5 + 2, "spill": 8 + 2, "infiniband": 4 + 12 + 2 + 4}
    assert {name: protocols.get(name) for name in expected} == expected, protocols
    assert not {"dns", "rpcordma", "smb_direct", "mad"} & set(protocols), protocols
    assert report["fields"] > 700, report


def test_broken_dissector_is_caught(pcap, tmp_path, monkeypatch):
    """The check fails when a dissector reads a field from the wrong bytes (INA index one byte late)."""
    broken = tmp_path / "lua"
    shutil.copytree(tshark.ROOT / "tools" / "wireshark", broken)
    source = (broken / "ina.lua").read_text()
    assert source.count("t:add(f.index, tvb(10, 2))") == 1
    (broken / "ina.lua").write_text(source.replace("t:add(f.index, tvb(10, 2))", "t:add(f.index, tvb(11, 2))"))
    monkeypatch.setattr(tshark, "LUA", sorted(broken.glob("*.lua")))
    report = tshark.check(pcap[0])
    wrong = {re.search(r": (\S+) is", m).group(1) for m in report["mismatches"]}
    assert wrong == {"ina.index"}, report["mismatches"][:5]


def test_cli(pcap, tmp_path):
    assert "no such file" in fails("tshark", str(tmp_path / "nosuch.pcap"))
    (tmp_path / "garbage.pcap").write_bytes(b"not a pcap")
    assert "garbage.pcap" in fails("tshark", str(tmp_path / "garbage.pcap"))
    result = cli("tools.tshark", "--strict", str(pcap[0]))
    assert result.returncode == 0 and " 0  " in result.stdout.splitlines()[1], result.stdout + result.stderr
