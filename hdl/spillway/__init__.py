"""Spillway (SPEC section 1) as a family of Components.

- ``inswitch.InSwitchSpillBuffer``: the in-switch buffering baseline (spilled handles wait in the switch);
- ``switch.SpillSwitch``: the switch side of the disaggregated Spillway, as the paper describes it;
- ``node.SpillNode``: the spill node that holds the spilled packets;
- ``link``: the spill link: its frames, ``Encapsulator``, ``Decapsulator`` and ``DelayLine``;
- ``top.Spillway``: switch side, spill node and a delay line each way, as one design.
"""
