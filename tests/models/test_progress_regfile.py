"""The progress register file's golden model alone (``models/progress_regfile.py``): its pipeline timing."""
from models.contract import Packet
from models.headers import roce_packet
from models.packet import beats_of
from models.progress_regfile import OP_INSTALL, OP_JOB, ProgressRegfileModel, ProgressRegfileParams

PARAMS = ProgressRegfileParams()


def cycle(model, packet=None, cmd=None, ready=1):
    """One clock cycle with single-beat ``packet`` (bytes) and ``cmd`` offered; the model's outputs."""
    beat = beats_of(packet, {}, PARAMS.data_bytes)[0] if packet is not None else None
    return model.step({"i__valid": int(beat is not None), "i__payload": beat,
                       "i__packet": Packet(packet) if packet is not None else None,
                       "cfg__valid": int(cmd is not None), "cfg__payload": cmd, "o__ready": ready})


def configured():
    model = ProgressRegfileModel(PARAMS)
    model.config({"op": OP_JOB, "job": 0, "chunk": 1, "delta": 0})
    for position in range(PARAMS.ring):
        model.config({"op": OP_INSTALL, "qp": 0x100 + position, "job": 0, "position": position})
    return model


def flow(position):
    return bytes(roce_packet(qp=0x100 + position, payload=bytes(2)))


def test_latency_three_and_counted_when_decided():
    """A packet taken in cycle 0 leaves in cycle 3 and counts when it leaves stage C (shown from cycle 3)."""
    model = configured()
    shown = [cycle(model, flow(0))] + [cycle(model) for _ in range(4)]
    assert [out["o__valid"] for out in shown] == [0, 0, 0, 1, 0]
    assert [out["tracked"] for out in shown] == [0, 0, 0, 1, 1]


def test_command_waits_for_the_pipeline_to_drain():
    """A command offered behind a packet is refused while it is in stage B, then C, then taken."""
    model = configured()
    cycle(model, flow(0))
    command = {"op": OP_INSTALL, "qp": 0x200, "job": 0, "position": 0, "chunk": 0, "delta": 0, "age_out": 0}
    readies = [cycle(model, flow(2), command) for _ in range(3)]
    assert [(out["cfg__ready"], out["i__ready"]) for out in readies] == [(0, 0), (0, 0), (1, 0)]
    assert model.flows[0x200 % PARAMS.table] == (0x200, 0, 0)


def test_reset_loses_the_packets_in_flight():
    """A reset with packets in stages B and C: neither is decided (no count, no row update)."""
    model = configured()
    cycle(model, flow(0))
    cycle(model, flow(0))
    model.reset()
    for _ in range(4):
        assert cycle(model)["tracked"] == 0
    assert model.rows[0][0] == [0] * PARAMS.ring, "a lost packet moved its flow's step"
