"""innet's network library for the scenarios: an event calendar, ports (queues with tail drop, ECN and
PFC on links of some bandwidth and latency), transports, collectives, seeds, and ``Clocked`` to put a
block's cycle model into the network. Blocks plug in through their golden models; the scenarios replay
(or co-simulate) their runs on the RTL through the lockstep."""
from scenarios.net.calendar import Calendar
from scenarios.net.clocked import Clocked
from scenarios.net.collective import AllToAll, RingAllReduce, Rounds
from scenarios.net.port import CE, ECT0, Ecn, Packet, Pfc, Port
from scenarios.net.seeds import seed, stream
from scenarios.net.transport import Dcqcn, GoBackN, SelectiveRepeat, Spray

__all__ = ["Calendar", "Clocked", "AllToAll", "RingAllReduce", "Rounds", "CE", "ECT0", "Ecn", "Packet", "Pfc",
           "Port", "seed", "stream", "Dcqcn", "GoBackN", "SelectiveRepeat", "Spray"]
