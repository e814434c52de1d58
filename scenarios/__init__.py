"""The system scenarios: each mechanism in its paper's setting, as product code (``python -m scenarios NAME``)
on the network library ``scenarios.net``; ``scenarios/test_*.py`` run each small and check its RTL agreement
and its oracle."""

#: Scenario name (its module ``scenarios.<name>``: ``arguments(parser)`` and ``main(args, out)``) -> what it runs.
SCENARIOS = {
    "spillway": "a cross-DC all-to-all colliding with an intra-DC ring all-reduce: tail drop, deflection, "
                "in-switch buffer, Spillway",
    "symphony": "ring all-reduce jobs on a leaf-spine fabric with jitter, with and without Symphony",
    "esa": "jobs of different priorities sharing an aggregator pool: ATP, SwitchML, ESA",
    "dblp": "training rounds under microbursts: reliable, static and phase-scheduled loss bounds",
    "sdr": "messages over a lossy long-haul link: selective repeat against erasure coding",
    "mrc": "EV spraying and SRv6 forwarding on a two-plane fabric: a lossy EV, a collision, failures",
}
