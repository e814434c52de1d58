"""A cycle model (``models/contract.py``) in an event-driven network: stepped once per cycle on the calendar."""
__all__ = ["Clocked"]


class Clocked:
    """Steps ``model`` at every whole time unit (cycle) from ``start()`` until ``stop()``: each cycle
    ``inputs()`` gives the model's inputs, ``model.step`` answers, ``outputs(inputs, answer)`` acts on it.
    With ``record`` every cycle's inputs are kept in ``record`` (the RTL replays them through the
    lockstep: ``scenarios.common.replay``). ``cycles`` counts the steps."""

    def __init__(self, calendar, model, inputs, outputs, record=False):
        self.cal, self.model, self.inputs, self.outputs = calendar, model, inputs, outputs
        self.record = [] if record else None
        self.cycles = 0
        self.running = False

    def start(self):
        """Step from the next whole time unit on."""
        if not self.running:
            self.running = True
            self.cal.at(-(-self.cal.now // 1), self._tick)

    def stop(self):
        self.running = False

    def _tick(self):
        if not self.running:
            return
        inputs = self.inputs()
        answer = self.model.step(inputs)
        if self.record is not None:
            self.record.append(inputs)
        self.cycles += 1
        self.outputs(inputs, answer)
        self.cal.after(1, self._tick)
