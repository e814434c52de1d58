"""When a block adds its own invariants: the ``Assert`` statements its proofs rely on.

A proof elaborates a block for the platform ``"formal"``; a simulation for ``SIMULATION``
(testbenches/runner.py), which brings the same invariants for Verilator to check every cycle, and nothing
else ``"formal"`` means to Amaranth's library (its FIFOs' ``Initial()`` assumptions, which no simulator
builds)."""

__all__ = ["SIMULATION", "asserted"]

#: The platform a simulation's design is elaborated for.
SIMULATION = "simulation-with-invariants"


def asserted(platform):
    """Whether a block elaborated for ``platform`` adds its invariants (a proof's, or a simulation's)."""
    return platform in ("formal", SIMULATION)
