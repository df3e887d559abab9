"""
Joint velocities for JointState streams whose driver publishes positions only.

Many drivers leave `velocity` empty (position-controlled arms, hobby servos, some simulators)
or fill it with zeros. The learners need qd, so without this every such message was refused
(missing_field) and the node learned nothing. `VelocitySource` gives each accepted sample the
velocity it is used with: the measured one, or the causal derivative of the positions
(`CausalDifferentiator`: a one-sided quadratic fit over `window` samples evaluated at the
newest stamp, no delay for motion up to quadratic).
"""
from typing import Optional

import numpy as np
from robot_dynamics_learning.data.messages import FieldNeed
from robot_dynamics_learning.signals.causal import CausalDifferentiator

# auto: the measured velocity where the message carries one, else derived from positions;
# measured: a message without velocity is refused; positions: always derived (a driver
# whose velocity is wrong, e.g. zeros, or in other units).
VELOCITY_SOURCES = ('auto', 'measured', 'positions')
VELOCITY_WINDOW = 15   # 15 ms at 1 kHz, 0.14 s at 100 Hz (docs/continual.md "Velocity")


def check_velocity_source(source: str) -> None:
    """Refuse an unknown velocity_source, naming the choices."""
    if source not in VELOCITY_SOURCES:
        raise ValueError(f'velocity_source must be one of {VELOCITY_SOURCES}, got {source!r}')


def velocity_need(source: str) -> FieldNeed:
    """Return how the JointState parser treats `velocity` for this source."""
    check_velocity_source(source)
    return {'measured': FieldNeed.REQUIRED, 'auto': FieldNeed.OPTIONAL,
            'positions': FieldNeed.IGNORE}[source]


class VelocitySource:
    """
    The velocity of each accepted sample: measured, or differentiated from the positions.

    Under 'auto' the positions are differentiated from the first message without velocity on
    (every later position feeds the fit, so the derivative is warm whenever a message lacks
    one). A derived velocity is None for the first `window - 1` samples after a start, a
    `reset()` (time reset) or a gap (the caller skips those samples, as it does while its
    acceleration estimate warms up).
    """

    def __init__(self, n_joints: int, source: str = 'auto',
                 window: int = VELOCITY_WINDOW) -> None:
        check_velocity_source(source)
        self.n_joints, self.source, self.window = n_joints, source, window
        self._derivative: Optional[CausalDifferentiator] = None
        self.derived = 0    # samples given a derived velocity
        self.warming = 0    # samples skipped while the derivative warms up
        if source == 'positions':
            self._start()

    @property
    def deriving(self) -> bool:
        """Return True once positions are being differentiated."""
        return self._derivative is not None

    def _start(self) -> None:
        self._derivative = CausalDifferentiator(self.n_joints, window=self.window)

    def velocity(self, stamp_s: float, position: np.ndarray,
                 measured: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Return the velocity to use at stamp_s (strictly after the last), or None (warming)."""
        if self.source == 'measured' or (measured is not None and self._derivative is None):
            return measured
        if self._derivative is None:
            self._start()
        derived = self._derivative.update(stamp_s, position)
        if self.source == 'auto' and measured is not None:
            return measured
        if derived is None:
            self.warming += 1
            return None
        self.derived += 1
        return derived

    def reset(self) -> None:
        """Forget the positions (time reset): derivation resumes after `window` samples."""
        if self._derivative is not None:
            self._derivative.reset()

    def diagnostics(self) -> dict:
        """Return the counters for /diagnostics."""
        return {'velocity_derived': self.derived, 'velocity_warming': self.warming}
