"""The cocotb testbench API in one import (``from testbenches import tb``): the run context
(``testbenches/context.py``), layouts (``layouts.py``), drivers (``streams.py``), functional coverage
(``functional.py``), the block testbench base and its lockstep (``block_tb.py``) and a scoreboard for a
test's own expectations (``scoreboard.py``)."""
from testbenches.block_tb import BlockTB, PortValues, follow
from testbenches.context import (
    Frame,
    current_test,
    log,
    now,
    params,
    reset,
    run_dir,
    seed,
    start_clock,
    summary,
    write_pcap,
)
from testbenches.functional import Coverage
from testbenches.layouts import pack, unpack
from testbenches.scoreboard import Scoreboard
from testbenches.streams import HANG_CYCLES, PacketSink, PacketSource, StreamSink, StreamSource

__all__ = [
    "pack", "unpack", "Frame", "StreamSource", "StreamSink", "PacketSource", "PacketSink", "Scoreboard",
    "BlockTB", "PortValues", "follow", "Coverage", "HANG_CYCLES", "start_clock", "reset", "params", "run_dir",
    "current_test", "seed", "now", "summary", "write_pcap", "log",
]
