"""
An online estimate of the surface's grip: the largest lateral acceleration the car holds.

Why: the track MPC's cost has no notion of grip; on a slippery surface it keeps the speed
it drove on a grippy one and the car slides (docs/results_car.md section 10). The MPC's
lateral-acceleration bound (`MPCConfig.grip_weight`) needs a limit, and the limit is one
number the driven transitions show directly, without a model:

- the kinematic yaw rate r_kin = vx tan(steering x max_steer) / wheelbase is what a car
  whose wheels roll without slip turns at; a gripping car's measured yaw rate follows it,
  a sliding one's does not (below it when the front washes out, above when the rear lets
  go). The relative mismatch |r / r_kin - 1| of each informative transition (vx and
  |r_kin| large enough to say anything) is low-pass filtered (`slip_gain`), since single
  transitions also mismatch in steering transients and through the estimator's lag.
- sliding (filtered mismatch above `slide_threshold`): the car held the largest lateral
  acceleration |vx r| of the last `PEAK_WINDOW` informative transitions and then let go, so
  that peak is where the surface's limit lies (while sliding, |vx r| itself shows neither:
  the friction falls to its dynamic level and vy, not r, carries the motion); the estimate
  moves towards the peak by `grip_gain` when the peak lies below it.
- gripping (mismatch below half the threshold): a lateral acceleration above the estimate
  was held, so the estimate moves up towards it by `grip_gain`.
- every transition the estimate relaxes towards `grip_ceiling` by (1 - `grip_forgetting`)
  of the gap: old sliding evidence fades, so a surface that grips again is found.

The estimate stays within [`grip_floor`, `grip_ceiling`] and starts at the ceiling (no
evidence: no bound). Non-finite transitions are refused and counted; they never reach it.
"""
import collections
from dataclasses import dataclass
import math
from typing import Dict, Sequence

import numpy as np
from robot_dynamics_learning.params import check_ranges, setting

MIN_SPEED = 0.3      # m/s: slower transitions say nothing about grip (r / r_kin is noise)
MIN_YAW_RATE = 0.5   # rad/s: |r_kin| below this is straight driving, no lateral evidence
# Informative transitions (1 s at 20 Hz) searched for the breakaway: longer than the filter
# takes to call a slide (about 11 transitions for a mismatch of 0.6 at slip_gain 0.1), so
# the window still holds the gripping transitions before it.
PEAK_WINDOW = 20


@dataclass(frozen=True)
class GripConfig:
    """Settings of `GripEstimator` (car_model_learner's grip_* settings)."""

    grip_floor: float = setting(1.0, 'lowest grip estimate (lateral acceleration, m/s^2)',
                                0.01, 100.0)
    grip_ceiling: float = setting(8.0, 'highest grip estimate and the start value: no '
                                  'evidence, no bound (m/s^2)', 0.01, 100.0)
    grip_gain: float = setting(0.1, 'share of the gap to a sliding or gripping '
                               "transition's lateral acceleration the estimate moves",
                               0.0, 1.0)
    grip_forgetting: float = setting(0.9995, 'per transition, the estimate keeps this share '
                                     'of its gap to the ceiling (1: never relaxes; 0.9995 '
                                     'at 20 Hz: half the gap in about 70 s)', 0.0, 1.0)
    slip_gain: float = setting(0.1, 'low-pass gain of the yaw-rate mismatch |r / r_kin - 1| '
                               'per informative transition', 0.001, 1.0)
    slide_threshold: float = setting(0.4, 'filtered yaw-rate mismatch above which the car '
                                     'slides (below half of it: grips)', 0.01, 10.0)
    wheelbase: float = setting(0.1735, 'distance between the axles (m), for the kinematic '
                               'yaw rate', 1e-3, 100.0)
    max_steer: float = setting(0.45, 'front wheel angle at steering 1 (rad), for the '
                               'kinematic yaw rate', 1e-3, 1.5)

    def __post_init__(self) -> None:
        """Refuse settings that cannot work, naming them."""
        check_ranges(self)
        if not self.grip_floor <= self.grip_ceiling:
            raise ValueError(f'grip_floor ({self.grip_floor}) must not exceed grip_ceiling '
                             f'({self.grip_ceiling})')


class GripEstimator:
    """Transitions in, the lateral acceleration the surface holds (m/s^2) out (docstring)."""

    def __init__(self, config: GripConfig = GripConfig()) -> None:
        self.config = config
        self.estimate = config.grip_ceiling
        self.mismatch = 0.0
        self._recent = collections.deque(maxlen=PEAK_WINDOW)   # recent |vx r| (m/s^2)
        self.counts = {'grip_transitions': 0, 'grip_informative': 0, 'grip_sliding': 0,
                       'grip_gripping': 0, 'grip_rejected_non_finite': 0}

    def update(self, command: Sequence[float], next_state: Sequence[float]) -> float:
        """
        Take one transition's command (throttle, steering) and end state; return the estimate.

        The end state (h after the command took effect) carries the response: its forward
        speed and yaw rate.
        """
        command = np.asarray(command, dtype=np.float64)
        state = np.asarray(next_state, dtype=np.float64)
        if command.shape != (2,) or state.shape != (6,) \
                or not (np.all(np.isfinite(command)) and np.all(np.isfinite(state))):
            self.counts['grip_rejected_non_finite'] += 1
            return self.estimate
        cfg = self.config
        self.counts['grip_transitions'] += 1
        estimate = cfg.grip_ceiling - cfg.grip_forgetting * (cfg.grip_ceiling - self.estimate)
        vx, r = float(state[3]), float(state[5])
        kinematic = vx * math.tan(float(np.clip(command[1], -1.0, 1.0)) * cfg.max_steer) \
            / cfg.wheelbase
        if vx >= MIN_SPEED and abs(kinematic) >= MIN_YAW_RATE:
            self.counts['grip_informative'] += 1
            mismatch = min(abs(r / kinematic - 1.0), 2.0)
            self.mismatch += cfg.slip_gain * (mismatch - self.mismatch)
            lateral = abs(vx * r)
            self._recent.append(lateral)
            if self.mismatch > cfg.slide_threshold:
                self.counts['grip_sliding'] += 1
                peak = max(self._recent)
                if peak < estimate:
                    estimate += cfg.grip_gain * (peak - estimate)
            elif self.mismatch < 0.5 * cfg.slide_threshold:
                self.counts['grip_gripping'] += 1
                if lateral > estimate:
                    estimate += cfg.grip_gain * (lateral - estimate)
        self.estimate = float(np.clip(estimate, cfg.grip_floor, cfg.grip_ceiling))
        return self.estimate

    def diagnostics(self) -> Dict[str, float]:
        """Return the counters, the estimate and the filtered mismatch."""
        return {**self.counts, 'grip_estimate': self.estimate, 'grip_mismatch': self.mismatch}
