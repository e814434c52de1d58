"""Cycle-accurate golden model of ``Spillway`` (``hdl/spillway/top.py``): the switch side's, the spill node's
and the two links' models stepped together, as the hardware is."""
from models.params import check
from models.spillway.link import DelayLineModel
from models.spillway.node import SpillNodeModel
from models.spillway.params import SpillwayParams
from models.spillway.switch import SpillSwitchModel

__all__ = ["SpillwayModel"]


class SpillwayModel:
    """Cycle-accurate model (``models/contract.py``) of ``Spillway``. Each cycle: the links' heads (they do
    not depend on the cycle's inputs) go to the switch's ``spill_i`` and the node's ``i``; the switch and the
    node step; what they send enters the links (``spill_pause``/``node_pause`` hold the switch's and the
    node's link output). ``counters()``: the switch side's, and the node's as ``node_<name>``."""

    KIND = "cycle"

    def __init__(self, params=None):
        p = self.params = check(params, SpillwayParams)
        self.switch, self.node = SpillSwitchModel(p.switch), SpillNodeModel(p.node)
        self.down, self.up = DelayLineModel(p.link), DelayLineModel(p.link)

    def reset(self):
        for part in (self.switch, self.node, self.down, self.up):
            part.reset()

    def step(self, inputs):
        back, there = self.up.head(), self.down.head()
        switch = self.switch.step({**inputs, "spill_o__ready": int(not inputs["spill_pause"]),
                                   "spill_i__valid": int(back is not None), "spill_i__payload": back})
        node = self.node.step({"i__valid": int(there is not None), "i__payload": there,
                               "o__ready": int(not inputs["node_pause"])})
        self.down.step({"i__valid": switch["spill_o__valid"], "i__payload": switch["spill_o__payload"],
                        "pause": inputs["spill_pause"]})
        self.up.step({"i__valid": node["o__valid"], "i__payload": node["o__payload"], "pause": inputs["node_pause"]})
        return {"i__ready": switch["i__ready"], "o__valid": switch["o__valid"], "o__payload": switch["o__payload"],
                "credits": switch["credits"], "outstanding": switch["outstanding"], "node_stored": node["stored"]}

    def counters(self):
        return {**self.switch.counters(), **{f"node_{k}": v for k, v in self.node.counters().items()}}
