"""
The car MPC's safety logic without ROS: which state may be planned from, and when to brake.

car_mpc (nodes/car_mpc.py) feeds it the pose and twist stamps and values it receives and asks
it, at each tick, whether to solve, skip or brake, and after the solve whether to publish the
plan's command or brake; its watchdog asks whether a brake is due. Time is an injected clock
(`now_ns`, the node clock: sim time with use_sim_time), so every transition is unit-tested
without DDS or wall-clock sleeps (test/test_car_supervisor.py).

Rules (unchanged from the node): a complete state is a pose and a twist with the same header
stamp; an input is dropped (and counted by reason) when non-finite, not newer than the last
one of its topic (out of order or repeated), or stamped more than stale_timeout_s ahead of
the clock; the state is stale when the newest complete one is stamped more than
stale_timeout_s before now (judged by stamps, so a late-delivered old state stays stale);
after a brake the car only drives again from a state stamped after the one the brake was
judged on; a solve that missed its budget, failed, or ended with the state stale brakes too.
Not thread-safe: the node calls it under its lock.
"""
from typing import Callable, Dict, NamedTuple, Optional, Sequence

import numpy as np

# What a tick does: plan from `state`, do nothing, brake, or publish the plan's command.
SOLVE, SKIP, BRAKE, PUBLISH = 'solve', 'skip', 'brake', 'publish'
TOPICS = ('pose', 'twist')


class Decision(NamedTuple):
    """An action and its reason; `stamp_ns`, `state` for SOLVE (the state to plan from)."""

    action: str
    reason: str = ''
    stamp_ns: int = -1
    state: Optional[np.ndarray] = None


class CarSupervisor:
    """State gate, brake latch and delay estimate of the car MPC (see the module docstring)."""

    def __init__(self, stale_timeout_s: float, now_ns: Callable[[], int]) -> None:
        if not (np.isfinite(stale_timeout_s) and stale_timeout_s > 0):
            raise ValueError(f'stale_timeout_s must be finite and > 0, got {stale_timeout_s}')
        self.stale_ns = int(stale_timeout_s * 1e9)
        self.now_ns = now_ns
        self._last: Dict[str, Optional[tuple]] = dict.fromkeys(TOPICS)
        self._state: Optional[tuple] = None   # newest complete (stamp_ns, (6,) state)
        self._brake_stamp = -1   # stamp of the state the last brake was judged on
        self.braking = False
        self.counts = {'ticks': 0, 'commands': 0, 'brake_stale': 0, 'brake_budget': 0,
                       'brake_failure': 0, 'rejected_out_of_order': 0,
                       'rejected_future_stamp': 0, 'rejected_non_finite': 0,
                       'skipped_after_brake': 0}

    def offer(self, topic: str, stamp_ns: int, values: Sequence[float]) -> Optional[str]:
        """Take a pose (x, y, yaw) or twist (vx, vy, r); return the drop reason or None."""
        last = self._last[topic]
        if not np.all(np.isfinite(values)):
            reason = 'non_finite'
        elif last is not None and stamp_ns <= last[0]:
            reason = 'out_of_order'
        elif stamp_ns - self.now_ns() > self.stale_ns:
            reason = 'future_stamp'
        else:
            self._last[topic] = (stamp_ns, tuple(float(v) for v in values))
            pose, twist = self._last['pose'], self._last['twist']
            if pose is not None and twist is not None and pose[0] == twist[0]:
                self._state = (pose[0], np.array([*pose[1], *twist[1]]))
            return None
        self.counts[f'rejected_{reason}'] += 1
        return reason

    def stale(self) -> bool:
        """Return True without a complete state stamped within stale_timeout_s of now."""
        return self._state is None or self.now_ns() - self._state[0] > self.stale_ns

    def brake(self, reason: str) -> bool:
        """Latch a brake for `reason` (counted); return True when it starts a braking spell."""
        self.counts[f'brake_{reason}'] += 1
        started = not self.braking
        self.braking = True
        self._brake_stamp = -1 if self._state is None else self._state[0]
        return started

    def watchdog(self) -> bool:
        """Return True when a brake is due between ticks (stale state, not braking yet)."""
        return not self.braking and self.stale()

    def before_solve(self) -> Decision:
        """Decide a tick: BRAKE on a stale state, SKIP the state a brake was judged on, SOLVE."""
        self.counts['ticks'] += 1
        if self.stale():
            return Decision(BRAKE, 'stale')
        stamp_ns, state = self._state
        if stamp_ns <= self._brake_stamp:
            self.counts['skipped_after_brake'] += 1
            return Decision(SKIP, 'after_brake')
        return Decision(SOLVE, '', stamp_ns, state.copy())

    def after_solve(self, stamp_ns: int, ok: bool, reason: str) -> Decision:
        """
        Decide what a finished solve of the state stamped `stamp_ns` publishes.

        BRAKE when the state went stale meanwhile or the solve missed its budget ('budget')
        or failed ('failure'); SKIP when a brake came during the solve (its plan must be
        dropped: the caller resets the MPC); else PUBLISH, which ends a braking spell.
        """
        if self.stale():
            return Decision(BRAKE, 'stale')
        if stamp_ns <= self._brake_stamp:
            self.counts['skipped_after_brake'] += 1
            return Decision(SKIP, 'brake_during_solve')
        if not ok:
            return Decision(BRAKE, 'budget' if reason == 'budget' else 'failure')
        self.braking = False
        self.counts['commands'] += 1
        return Decision(PUBLISH)

    def expected_delay(self, stamp_ns: int, solve_s: float, budget_s: float,
                       actuation_delay_s: float, limit_s: float = 0.5) -> float:
        """
        Seconds from the state's stamp until this tick's command applies (at most limit_s).

        The state's age on the clock (bounded by the stale timeout) plus the expected solve
        time (at most the budget) plus the actuation delay.
        """
        age = min(max((self.now_ns() - stamp_ns) * 1e-9, 0.0), self.stale_ns * 1e-9)
        return min(age + min(solve_s, budget_s) + actuation_delay_s, limit_s)
