"""MRC at work (``make sim BLOCK=mrc``): two runs, the NIC's EV selector and a switch's uSID forwarder.

EV selector: a QP sprays its packets over 16 EVs on two planes, round robin. An untrimmed loss on one
EV demotes it at once: its slot is refilled from the same plane's backups and the EV goes to the probe
pool, where ``probe_ok_n`` successful probes return it to its plane's backups. The baseline is static
spraying without EV state: the lossy EV would keep its share of the packets.

uSID forwarder: a packet whose destination carries this switch's uSID is shifted and forwarded, one that
reaches a local-function uSID is decapsulated, and MRC data packets that find their egress data queue
full are trimmed to their headers and sent on the priority queue, so the receiver NACKs them at once.
The baseline is a switch that drops them.
"""
import collections
import random

import cocotb
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from demos import Run, cycle, linger, window
from models.ev_selector import EVENT_KINDS, EvSelectorParams
from models.headers import mrc_packet, usid_address
from models.usid_forwarder import HDR_BYTES, VERDICTS, UsidForwarderParams
from testbenches import tb
from testbenches.test_usid_forwarder import deparse

TITLE = "an EV demoted on loss and replaced from its plane's backups; uSID forwarding, decapsulation, trimming"
#: Both blocks' testbench parameters (one build each): 16 EVs on 2 planes, 4 backups a plane, 3 probes.
SELECTOR = EvSelectorParams()
FORWARDER = UsidForwarderParams(last_hop=0b1100_0000, data_capacity=20, prio_capacity=4, ecn_kmin=6,
                                ecn_span_log2=3, table_entries=16)
RUNS = (Run("ev_selector", SELECTOR, "loss"), Run("usid_forwarder", FORWARDER, "usid"))
PCAPS = {"in": "packets in", "out": "packets out (deparsed)"}
#: The slot whose EV sees the loss; selections before and after it.
LOSSY, BEFORE, AFTER = 5, 32, 32
#: uSIDs of the forwarder's table: a transit route and a local function (decapsulation).
TRANSIT, LOCAL, NEXT = 0x0200, 0x00F0, 0x0300
PORT, HOST_PORT, TRIMS = 2, 6, 3
SELECTOR_SIGNALS = ("i__valid", "o__payload", f"state{LOSSY}", f"ev{LOSSY}", "demoted", "refilled", "probe_restored")
FORWARDER_SIGNALS = ("i__valid", "o__valid", "forwarded", "decapsulated", "trimmed")


class Selector(tb.BlockTB):
    """One request a cycle on ``i``, always ready on ``o``; the lockstep compares every cycle. Each cycle's
    answer and counters are kept (``answers``)."""

    name = "ev_selector"

    def __init__(self, dut):
        super().__init__(dut)
        self.request, self.answer = self._layout("i"), self._layout("o")
        self.answers = []
        dut.i__valid.value = dut.o__ready.value = 0

    def sampled(self, values):
        if values["i__valid"]:
            self.answers.append((cycle(tb.now()), tb.unpack(self.answer, values["o__payload"])))

    async def send(self, want, event=None):
        """One request: ``want`` an EV, and ``event`` (a dict with ``kind``) or none."""
        encoded = {"valid": 0} if event is None else {"valid": 1, **event, "kind": EVENT_KINDS.index(event["kind"])}
        self.dut.i__payload.value = tb.pack(self.request, {"want": int(want), "event": encoded})
        self.dut.i__valid.value = self.dut.o__ready.value = 1
        await self.edge()
        self.dut.i__valid.value = 0
        return self.answers[-1]


def carried(answers, ev):
    """Selections of ``ev`` among ``answers``."""
    return sum(a["selected"] and a["ev"] == ev for a in answers)


@cocotb.test()
async def loss(dut):
    """Fill the slots and backups, select BEFORE, lose a packet on slot LOSSY's EV, select AFTER, probe it
    back."""
    rng = random.Random(tb.seed())
    t = Selector(dut)
    await t.reset()
    p = t.params
    evs = rng.sample(range(1 << 16, 1 << p.ev_bits), p.n_ev + 2 * p.planes)
    for k, ev in enumerate(evs):             # slot k*planes+plane, then two backups a plane
        await t.send(False, {"kind": "backup", "plane": k % p.planes, "ev": ev})
    before = [(await t.send(True))[1] for _ in range(BEFORE)]
    lossy = evs[LOSSY]
    at, _ = await t.send(False, {"kind": "loss", "slot": LOSSY, "ev": lossy})
    after = [(await t.send(True))[1] for _ in range(AFTER)]
    replacement = next(a["ev"] for a in after if a["slot"] == LOSSY)
    back = None
    for _ in range(p.probe_ok_n):
        back, _ = await t.send(False, {"kind": "probe", "index": 0, "ev": lossy, "ok": 1})
    await linger(t)
    counters = t.check_counters()
    first = next(c for c, a in t.answers if a.get("selected") and a["slot"] == LOSSY and c > at)
    tb.summary(demo={"evs": p.n_ev, "planes": p.planes, "lossy": lossy, "plane": LOSSY % p.planes,
                     "replacement": replacement, "before": BEFORE, "after": AFTER,
                     "used_before": carried(before, lossy), "used_after": carried(after, lossy),
                     "replacement_after": carried(after, replacement),
                     "window": window(SELECTOR_SIGNALS, {"loss": at, "replacement used": first, "restored": back})})
    assert counters["demoted"] == counters["refilled"] == counters["probe_restored"] == 1


class Forwarder(tb.BlockTB):
    """Descriptors in, results out, table writes; the lockstep compares each result with the model's. The
    packets in and the packets the deparser sends are kept with their times (for the pcaps)."""

    name = "usid_forwarder"

    def __init__(self, dut):
        super().__init__(dut)
        self.source, self.sink, self.cfg = self.stream_source("i"), self.stream_sink("o"), self.stream_source("cfg")
        self.inputs, self.outputs, self.sent, self.taken = [], [], collections.deque(), collections.deque()
        cocotb.start_soon(self._deparse())

    def sampled(self, values):
        if values["i__valid"] and values["i__ready"]:
            self.taken.append(tb.now())

    def send(self, packet, data_depth=None):
        raw = bytes(packet)
        p = self.params
        self.source.send_nowait({"hdr": int.from_bytes(raw[:HDR_BYTES], "little"), "length": len(raw), "port": 0,
                                 "data_depth": data_depth or [0] * p.ports, "prio_depth": [0] * p.ports})
        self.sent.append(raw)

    async def _deparse(self):
        while True:
            res = await self.sink.recv()
            raw = self.sent.popleft()
            self.inputs.append(tb.Frame(self.taken.popleft(), raw))
            if VERDICTS[res["verdict"]] in ("forwarded", "trimmed", "trim_forwarded"):
                self.outputs.append((VERDICTS[res["verdict"]], res, tb.Frame(tb.now(), deparse(raw, res))))


def packet(usids, rng, payload):
    """An MRC data packet to the uSID list ``usids`` on an EV of the selector's kind, ECT(0)."""
    return mrc_packet(ev=rng.getrandbits(32) | 0xC000, da=usid_address(FORWARDER.locator, usids),
                      payload=bytes(payload), psn=rng.randrange(1 << 24))


@cocotb.test()
async def usid(dut):
    """Two routes; a transit packet, a packet to the local function, TRIMS packets into a full data queue."""
    rng = random.Random(tb.seed())
    t = Forwarder(dut)
    await t.reset()
    p = t.params
    t.cfg.send_nowait({"index": 0, "valid": 1, "key": p.locator << 16 | TRANSIT, "port": PORT, "decap": 0})
    t.cfg.send_nowait({"index": 1, "valid": 1, "key": p.locator << 16 | LOCAL, "port": HOST_PORT, "decap": 1})
    await t.cfg.wait_idle()
    t.send(packet([p.my_usid, TRANSIT, NEXT], rng, rng.randrange(64, 256)))
    t.send(packet([p.my_usid, LOCAL], rng, rng.randrange(64, 256)))
    full = [p.data_capacity if k == PORT else 0 for k in range(p.ports)]
    for _ in range(TRIMS):
        t.send(packet([p.my_usid, TRANSIT], rng, rng.randrange(512, 1024)), full)
    await t.source.wait_idle()
    while t.sent:
        await t.edge()
    await linger(t)
    t.check_done()
    counters = t.check_counters()
    t.write_pcaps(t.inputs, [f for _, _, f in t.outputs])
    (_, _, transit), (_, _, local), *trims = t.outputs
    tb.summary(demo={
        "in": [len(f.data) for f in t.inputs],
        "transit": {"da": [str(Ether(f.data)[IPv6].dst) for f in (t.inputs[0], transit)],
                    "hlim": [Ether(f.data)[IPv6].hlim for f in (t.inputs[0], transit)]},
        "local": [len(t.inputs[1].data), len(local.data)], "trimmed": [len(f.data) for _, _, f in trims],
        "dscp": [Ether(f.data)[IPv6].tc >> 2 for _, _, f in trims],
        "window": window(FORWARDER_SIGNALS, {"forwarded": cycle(transit.time), "decapsulated": cycle(local.time),
                                             "first trim": cycle(trims[0][2].time)})})
    assert counters["trimmed"] == TRIMS and counters["decapsulated"] == 1


def story(summaries):
    selector, forwarder = summaries
    s, c = selector["demo"], selector["counters"]
    f, k = forwarder["demo"], forwarder["counters"]
    share = s["after"] * s["used_before"] // s["before"]
    return [
        ("in", f"a QP spraying over {s['evs']} EVs on {s['planes']} planes: {s['before']} selections, an untrimmed "
               f"loss on EV {s['lossy']:#010x} (plane {s['plane']}), {s['after']} selections, "
               f"{SELECTOR.probe_ok_n} successful probes of it"),
        ("mrc", f"the EV was demoted at once ({c['demoted']} demoted): its slot refilled from plane {s['plane']}'s "
                f"backups with EV {s['replacement']:#010x} ({c['refilled']} refilled), which carried "
                f"{s['replacement_after']} of the next {s['after']} packets, the lossy EV {s['used_after']} (it had "
                f"carried {s['used_before']} of {s['before']}); the probes returned it to its plane's "
                f"backups ({c['probe_restored']} restored)"),
        ("baseline", f"static spraying (no EV state) keeps it: {share} of the {s['after']} packets on the lossy path"),
        ("in", f"{len(f['in'])} MRC packets at a switch (locator {FORWARDER.locator:#x}, uSID "
               f"{FORWARDER.my_usid:#06x}); port {PORT}'s data queue full ({FORWARDER.data_capacity}) for the last "
               f"{len(f['trimmed'])}"),
        ("mrc", f"shifted and forwarded: DA {f['transit']['da'][0]} to {f['transit']['da'][1]}, hop limit "
                f"{f['transit']['hlim'][0]} to {f['transit']['hlim'][1]}; decapsulated at local function "
                f"{LOCAL:#06x}: the inner packet, {f['local'][0]} to {f['local'][1]} bytes, on port {HOST_PORT} "
                f"({k['forwarded']} forwarded, {k['decapsulated']} of them decapsulated); {k['trimmed']} trimmed: "
                f"{min(f['in'][-TRIMS:])}-{max(f['in'][-TRIMS:])} bytes cut to {f['trimmed'][0]}, DSCP "
                f"{f['dscp'][0]}, on the priority queue"),
        ("baseline", f"without trimming the {k['trimmed']} are dropped (data_overflow): the receiver learns by "
                     "timeout, and the sender's selector takes each for a lossy path and demotes its EV"),
        ("latency", "none for the selector (an EV in the cycle it is asked for); a trimmed packet is retransmitted "
                    "after the receiver's NACK, one round trip, instead of a timeout"),
    ]
