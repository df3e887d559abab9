"""
RC car simulator with loss of traction (seed 003, Sec. III-A), emulated mocap, random driver.

State (B, 6): [x, y, yaw, vx, vy, r] with the pose in the world frame (m, m, rad) and the
body-frame velocities of the centre of mass (m/s, m/s, rad/s; x forward, y left).
Command (B, 2): [throttle in [-1, 1] (negative drives backwards), steering in [-1, 1]
(positive turns left)], the same normalised convention as the DART car's recordings.

The seed's model, as we implement it: each step we compute the body velocity a car without
wheel slip would have after `dt` (kinematic bicycle: rear wheels roll forward, front wheels
roll along the steering direction), then the force each axle needs to reach it (rear-wheel
drive: the rear axle also carries the throttle). An axle whose required force exceeds the
static friction limit mu_s times its normal load loses traction and its force is scaled down
to the dynamic level mu_d times its load (drifting: the rear lets go first under throttle).
Not physically exact (as in the seed): it reproduces grip at low speed and sliding in fast
tight turns.
"""
from dataclasses import dataclass, replace
from typing import Optional, Tuple

import numpy as np
from robot_dynamics_learning.params import check_ranges, setting

GRAVITY = 9.81


@dataclass(frozen=True)
class CarParams:
    """Simulated car parameters; defaults match the DART JetRacer (1.58 kg, wheelbase 0.1735 m)."""

    mass: float = setting(1.58, 'mass (kg)', 1e-3, 1e4)
    wheelbase: float = setting(0.1735, 'distance between the axles (m)', 1e-3, 100.0)
    rear_to_cg: float = setting(0.0868, 'rear axle to centre of mass (m), inside the '
                                'wheelbase', 1e-4, 100.0)
    max_accel: float = setting(7.0, 'longitudinal acceleration at full throttle (m/s^2)',
                               1e-3, 1e3)
    drag: float = setting(2.0, 'linear speed damping (1/s): top speed is max_accel / drag',
                          1e-6, 1e3)
    max_steer: float = setting(0.45, 'front wheel angle at steering 1 (rad)', 1e-3, 1.5)
    mu_static: float = setting(0.7, 'static friction coefficient of the traction limit',
                               1e-3, 10.0)
    mu_dynamic: float = setting(0.45, 'dynamic (sliding) friction coefficient, at most '
                                'mu_static', 1e-3, 10.0)
    yaw_inertia_factor: float = setting(1.0, 'yaw inertia = this x mass x a x b (a, b: axle '
                                        'distances to the centre of mass)', 1e-3, 100.0)
    dt: float = setting(0.01, 'integration step (s)', 1e-5, 1.0)

    def __post_init__(self) -> None:
        """Reject parameters that make the model meaningless."""
        check_ranges(self)
        if not self.rear_to_cg < self.wheelbase:
            raise ValueError(f'rear_to_cg must lie in (0, wheelbase), got {self.rear_to_cg}')
        if self.mu_dynamic > self.mu_static:
            raise ValueError(f'mu_dynamic ({self.mu_dynamic}) must not exceed mu_static '
                             f'({self.mu_static})')


@dataclass(frozen=True)
class FrictionChange:
    """
    A surface change during a run: from time_s on, both friction coefficients are x factor.

    Why: the online-adaptation experiment (bench/car_adaptation.py) halves the grip mid-run,
    as when the car drives from a carpet onto polished tiles.
    """

    time_s: float
    factor: float = 0.5

    def __post_init__(self) -> None:
        """Reject a non-finite time or a factor that is not positive."""
        if not np.isfinite(self.time_s) or not self.factor > 0:
            raise ValueError(f'FrictionChange needs a finite time_s and factor > 0, got '
                             f'{self.time_s}, {self.factor}')

    def params_at(self, params: CarParams, time_s: float) -> CarParams:
        """Return the parameters in force at time_s (the changed friction after time_s)."""
        if time_s < self.time_s:
            return params
        return replace(params, mu_static=params.mu_static * self.factor,
                       mu_dynamic=params.mu_dynamic * self.factor)


def car_step(state: np.ndarray, command: np.ndarray, params: CarParams,
             dt: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """
    Advance (B, 6) states by one step of `dt` under (B, 2) commands (clipped to [-1, 1]).

    Returns (next state (B, 6), slipping (B, 2) bool per axle [front, rear]).
    """
    dt = params.dt if dt is None else dt
    state = np.asarray(state, dtype=np.float64)
    command = np.clip(np.asarray(command, dtype=np.float64), -1.0, 1.0)
    if not np.all(np.isfinite(state)):
        raise ValueError('car_step: state contains NaN or inf')
    x, y, yaw, vx, vy, r = (state[:, i] for i in range(6))
    throttle, steering = command[:, 0], command[:, 1]
    lf = params.wheelbase - params.rear_to_cg
    lr = params.rear_to_cg
    delta = steering * params.max_steer
    # No-slip target: forward speed follows throttle and drag; yaw rate and lateral velocity
    # of the centre of mass follow the bicycle geometry.
    vx_t = vx + dt * (params.max_accel * throttle - params.drag * vx)
    r_t = vx_t * np.tan(delta) / params.wheelbase
    vy_t = r_t * lr
    # Forces that reach the no-slip target within dt: inertial acceleration of the centre of
    # mass (change of body velocity plus the frame rotation omega x v) and yaw acceleration.
    a_x = (vx_t - vx) / dt - r * vy
    a_y = (vy_t - vy) / dt + r * vx
    alpha = (r_t - r) / dt
    m, inertia = params.mass, params.mass * lf * lr * params.yaw_inertia_factor
    force_xr = m * a_x  # rear-wheel drive: the front wheels roll freely
    force_yr = (m * a_y * lf - inertia * alpha) / params.wheelbase
    force_yf = (m * a_y * lr + inertia * alpha) / params.wheelbase
    # Per-axle traction limit proportional to its static normal load.
    load_f = m * GRAVITY * lr / params.wheelbase
    load_r = m * GRAVITY * lf / params.wheelbase
    slipping = np.zeros((state.shape[0], 2), dtype=bool)
    demand_f = np.abs(force_yf)
    demand_r = np.hypot(force_xr, force_yr)
    scales = []
    for k, (demand, load) in enumerate(((demand_f, load_f), (demand_r, load_r))):
        slip = demand > params.mu_static * load
        scales.append(np.where(slip, params.mu_dynamic * load / np.maximum(demand, 1e-12),
                               1.0))
        slipping[:, k] = slip
    force_yf = force_yf * scales[0]
    force_xr, force_yr = force_xr * scales[1], force_yr * scales[1]
    vx_n = vx + dt * (force_xr / m + r * vy)
    vy_n = vy + dt * ((force_yf + force_yr) / m - r * vx)
    r_n = r + dt * (force_yf * lf - force_yr * lr) / inertia
    # Pose: integrate the mean body velocity over the step at the mid-step heading.
    yaw_mid = yaw + 0.5 * dt * (r + r_n)
    vxm, vym = 0.5 * (vx + vx_n), 0.5 * (vy + vy_n)
    c, s = np.cos(yaw_mid), np.sin(yaw_mid)
    nxt = np.stack([x + dt * (c * vxm - s * vym), y + dt * (s * vxm + c * vym),
                    yaw + dt * 0.5 * (r + r_n), vx_n, vy_n, r_n], axis=1)
    return nxt, slipping


def simulate(state0: np.ndarray, commands: np.ndarray, params: CarParams,
             hold: float) -> np.ndarray:
    """
    Play (B, H, 2) commands, each held for `hold` seconds, from (B, 6) states.

    Returns (B, H + 1, 6) states at the command instants (index 0 is state0). The simulator
    sub-steps at params.dt.
    """
    substeps = max(1, int(round(hold / params.dt)))
    dt = hold / substeps
    states = [np.asarray(state0, dtype=np.float64)]
    current = states[0]
    for i in range(commands.shape[1]):
        for _ in range(substeps):
            current, _ = car_step(current, commands[:, i], params, dt)
        states.append(current)
    return np.stack(states, axis=1)


def _travel_angle(state: np.ndarray, lateral: np.ndarray, min_speed: float) -> np.ndarray:
    """atan2(lateral, |vx|) (rad) of (..., 6) states; 0 where the car moves below min_speed."""
    speed = np.hypot(state[..., 3], state[..., 4])
    return np.where(speed > min_speed, np.arctan2(lateral, np.abs(state[..., 3])), 0.0)


def slip_angle(state: np.ndarray, min_speed: float = 0.3) -> np.ndarray:
    """
    Vehicle side-slip angle beta = atan2(vy, |vx|) (rad) at the centre of mass, (..., 6) states.

    Not a drift measure on its own: a gripping car at full lock already has
    beta = atan(lr / L tan(delta)) into the turn (13.6 deg for the DART car), and a rear that
    slides out of the turn subtracts from it. `rear_slip_angle` measures the slide.
    """
    return _travel_angle(state, state[..., 4], min_speed)


def rear_slip_angle(state: np.ndarray, params: CarParams, min_speed: float = 0.3) -> np.ndarray:
    """
    Slip angle of the rear (unsteered) axle, atan2(vy - lr r, |vx|) (rad), (..., 6) states.

    The tyre slip angle (SAE J670's "slip angle"; the body's is the side-slip angle) is what
    says that a car drifts: in this simulator the rear axle moves sideways only once it has
    lost traction, so the angle is 0 in every gripping manoeuvre, whatever the steering.
    """
    lateral = state[..., 4] - params.rear_to_cg * state[..., 5]
    return _travel_angle(state, lateral, min_speed)


@dataclass(frozen=True)
class MocapNoise:
    """
    Emulated motion capture: pose noise (m, rad), dropout probability, rare outlier jumps.

    Rates are per frame. Dropped frames are not published at all (as a mocap system that
    loses a marker); jumps add `jump_size` m to the position for one frame.
    """

    rate_hz: float = setting(240.0, 'mocap frame rate (also the simulation step)', 10.0,
                             1000.0)
    position_std: float = setting(0.002, 'mocap position noise (m)', 0.0, 1.0)
    yaw_std: float = setting(0.01, 'mocap yaw noise (rad)', 0.0, 1.0)
    dropout: float = setting(0.02, 'probability that a mocap frame is lost', 0.0, 1.0)
    jump_probability: float = setting(0.0, 'probability of a one-frame position jump', 0.0,
                                      1.0)
    jump_size: float = setting(0.5, 'size of a mocap jump (m)', 0.0, 10.0)

    def __post_init__(self) -> None:
        """Refuse values outside their ranges, naming them."""
        check_ranges(self)


def emulate_mocap(states: np.ndarray, noise: MocapNoise, rng: np.random.Generator
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """
    Turn (T, 6) true states into mocap frames: returns (valid (T,) bool, poses (T, 3)).

    poses are [x, y, yaw] with yaw wrapped to (-pi, pi] as a mocap system reports it.
    """
    count = states.shape[0]
    poses = states[:, :3].copy()
    poses[:, :2] += rng.normal(0.0, noise.position_std, (count, 2))
    poses[:, 2] += rng.normal(0.0, noise.yaw_std, count)
    jumps = rng.random(count) < noise.jump_probability
    poses[jumps, 0] += noise.jump_size
    poses[:, 2] = np.angle(np.exp(1j * poses[:, 2]))
    valid = rng.random(count) >= noise.dropout
    return valid, poses


@dataclass(frozen=True)
class DrivingStyle:
    """
    Extra kinds of driving the random driver mixes in (shares of its targets; 0: none).

    step_probability: bursts of 0.3-1.5 s of commands that jump every step_hold s to random
    values, as an optimised plan drives (full lock to straight from one step to the next),
    which the lagged thumbs never do. drift_probability: full throttle at full lock for
    1-2.5 s, long enough for the rear to break loose (the simulator needs about 1 s of it,
    while the human-like driver's drift provocations last 0.3-1.5 s and so rarely drift).
    """

    step_probability: float = 0.0
    drift_probability: float = 0.0
    step_hold: float = 0.05

    def __post_init__(self) -> None:
        """Reject shares outside [0, 1] and a non-positive hold."""
        for name in ('step_probability', 'drift_probability'):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f'DrivingStyle.{name} must lie in [0, 1], got '
                                 f'{getattr(self, name)}')
        if not self.step_hold > 0:
            raise ValueError(f'DrivingStyle.step_hold must be positive, got {self.step_hold}')


class RandomDriver:
    """
    A human-like random driving policy for data collection (throttle and steering in [-1, 1]).

    Piecewise-smooth commands: every 0.3-1.5 s a new target is drawn (mostly forward driving,
    sometimes full throttle with full lock to provoke drifting, sometimes reversing or
    braking); commands approach the target with a first-order lag as a driver's thumbs do.
    `style` mixes in stepped (plan-like) commands and long drifts; with the default style
    the random stream, and so the data, is that of the human-like driver alone.
    """

    def __init__(self, rng: np.random.Generator, dt: float,
                 style: DrivingStyle = DrivingStyle()) -> None:
        self.rng = rng
        self.dt = dt
        self.style = style
        self.command = np.zeros(2)
        self.target = np.zeros(2)
        self.time_left = 0.0
        self.stepping = False
        self.hold_left = 0.0

    def _new_target(self) -> None:
        mode = self.rng.random()
        if mode < 0.55:  # cruising
            target = [self.rng.uniform(0.1, 0.7), self.rng.uniform(-0.8, 0.8)]
        elif mode < 0.75:  # aggressive: drift provocation
            target = [self.rng.uniform(0.7, 1.0), self.rng.choice([-1.0, 1.0])]
        elif mode < 0.9:  # reverse
            target = [self.rng.uniform(-0.8, -0.1), self.rng.uniform(-1.0, 1.0)]
        else:  # coast or brake
            target = [self.rng.uniform(-0.3, 0.1), self.rng.uniform(-0.5, 0.5)]
        self.target = np.asarray(target, dtype=np.float64)
        self.time_left = self.rng.uniform(0.3, 1.5)
        if self.style.drift_probability > 0 and self.rng.random() < self.style.drift_probability:
            self.target = np.array([self.rng.uniform(0.8, 1.0), self.rng.choice([-1.0, 1.0])])
            self.time_left = self.rng.uniform(1.0, 2.5)

    def _step_command(self) -> np.ndarray:
        """Hold a random command for step_hold s, then jump (a burst of plan-like commands)."""
        if self.hold_left <= 0:
            throttle = self.rng.uniform(-0.3, 1.0) if self.rng.random() < 0.8 else \
                self.rng.uniform(-1.0, 0.0)
            steering = self.rng.choice([-1.0, 1.0]) if self.rng.random() < 0.3 else \
                self.rng.uniform(-1.0, 1.0)
            self.command = np.array([throttle, steering])
            self.hold_left = self.style.step_hold * self.rng.integers(1, 5)
        self.hold_left -= self.dt
        return self.command.copy()

    def __call__(self) -> np.ndarray:
        """Return the next (2,) command."""
        if self.time_left <= 0:
            self._new_target()
            self.stepping = (self.style.step_probability > 0.0
                             and self.rng.random() < self.style.step_probability)
            self.hold_left = 0.0
        self.time_left -= self.dt
        if self.stepping:
            return self._step_command()
        gain = min(1.0, self.dt / 0.1)
        self.command = self.command + gain * (self.target - self.command)
        return np.clip(self.command, -1.0, 1.0)


def collect_driving(duration_s: float, params: CarParams, rng: np.random.Generator,
                    cars: int = 1, arena: float = 4.0, style: DrivingStyle = DrivingStyle()
                    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Drive `cars` independent cars with the random policy for `duration_s` s at params.dt.

    style: what the random driver mixes in besides human-like driving (`DrivingStyle`).

    Returns (time (T,), states (cars, T, 6), commands (cars, T, 2)); command t acts from t
    to t+1. A car that leaves the square arena of half-size `arena` m is put back at the
    origin at rest with a random heading (a human would pick it up); split drives at those
    resets with `reset_indices`.
    """
    steps = int(round(duration_s / params.dt))
    drivers = [RandomDriver(rng, params.dt, style) for _ in range(cars)]
    state = np.zeros((cars, 6))
    states = np.zeros((cars, steps, 6))
    commands = np.zeros((cars, steps, 2))
    for i in range(steps):
        out = np.max(np.abs(state[:, :2]), axis=1) > arena
        if np.any(out):
            state[out] = 0.0
            state[out, 2] = rng.uniform(-np.pi, np.pi, int(out.sum()))
        states[:, i] = state
        commands[:, i] = np.stack([driver() for driver in drivers])
        state, _ = car_step(state, commands[:, i], params)
    return np.arange(steps) * params.dt, states, commands


def reset_indices(states: np.ndarray, dt: float, max_speed: float = 20.0) -> np.ndarray:
    """Return indices i where states[i] -> states[i+1] is a reset (a jump no car can make)."""
    step = np.hypot(*np.diff(states[:, :2], axis=0).T)
    return np.flatnonzero(step > max_speed * dt)
