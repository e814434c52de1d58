"""An in-order scoreboard for a test's own expectations (the golden model's comparisons go through the
lockstep)."""
import collections

from scapy.layers.l2 import Ether

from testbenches.context import log

__all__ = ["Scoreboard"]


def _describe(item):
    if isinstance(item, (bytes, bytearray)):
        return f"{len(item)} bytes: {Ether(item).summary()}"
    if isinstance(item, tuple) and item and isinstance(item[0], (bytes, bytearray)):
        return f"({_describe(item[0])}, {item[1:]})"
    return repr(item)


def _first_difference(expected, actual):
    if isinstance(expected, tuple) and isinstance(actual, tuple) and expected and actual:
        expected, actual = expected[0], actual[0]
    if isinstance(expected, (bytes, bytearray)) and isinstance(actual, (bytes, bytearray)):
        for offset, (e, a) in enumerate(zip(expected, actual)):
            if e != a:
                return f"first differing byte at offset {offset}: expected {e:#04x}, got {a:#04x}"
        return f"lengths differ: expected {len(expected)}, got {len(actual)}"
    return ""


class Scoreboard:
    """In-order checker: ``expect`` golden-model items, ``check`` RTL items against them."""

    def __init__(self, name):
        self.name = name
        self.expected = collections.deque()
        self.matched = 0

    def expect(self, item):
        self.expected.append(item)

    def check(self, actual):
        assert self.expected, f"{self.name}: RTL produced {_describe(actual)} the model did not expect"
        expected = self.expected.popleft()
        if expected != actual:
            raise AssertionError(
                f"{self.name}: item {self.matched} differs from the golden model\n"
                f"  expected {_describe(expected)}\n  actual   {_describe(actual)}\n  "
                + _first_difference(expected, actual))
        self.matched += 1

    def check_done(self):
        assert not self.expected, (
            f"{self.name}: {len(self.expected)} expected items never came out of the RTL, "
            f"next: {_describe(self.expected[0])}")
        log.info("%s: %d items matched the golden model", self.name, self.matched)
