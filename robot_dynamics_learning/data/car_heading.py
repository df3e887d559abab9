"""
Is the mocap heading the car's forward axis? Judged from the way the car travels.

A motion-capture rigid body defined with its x axis to the side or to the back (a common
slip when the markers are placed) gives a yaw 90 or 180 degrees away from the car's heading.
Every model then learns a car that drives sideways, the bicycle model's physics and the MPC's
heading cost are wrong, and nothing fails. Travel at speed shows it: the velocity of a car
points along its heading (forward, or backward when reversing) except for short slides. On
the 17 DART Vicon recordings 99.2-100 % of the samples above 0.5 m/s lie within 45 degrees
of the heading. The commands are judged the same way: forward travel under a negative
throttle is a throttle of the other sign, a yaw rate against steering x vx a steering of
the other sign (DART pooled correlation +0.95); a reversed heading flips the second too.
"""
from dataclasses import dataclass, replace
import math
from typing import Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.car_datasets import MAX_YAW_RATE, UNIT_ERROR_SHARE
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.signals.offline import savgol_at_stamps

MIN_SPEED = 0.5   # m/s: slower travel gives a noisy direction
MIN_MOVING = 50   # samples at speed needed to judge
ALONG = math.pi / 4   # travel within 45 degrees of the heading axis counts as along it
MAX_OFF_SHARE = 0.5   # more travel than this off the forward direction is a wrong heading
# Read as degrees, a yaw must put all but this share of the travel along the heading (DART
# in radians: 0-0.8 %; a car turning under a nearly fixed heading: up to half sideways).
ALIGNED_SHARE = 0.1
# |correlation| of the yaw rate with steering x vx that settles its sign (DART, pooled: 0.95)
STEERING_SURE = 0.5
THROTTLE_FIX = 'the throttle has the other sign (rdl car: --throttle-scale with the other sign)'
VELOCITY_WINDOW_S = 0.1
# A ground car's body z axis stays within a few degrees of vertical; 45 is a frame error.
MAX_TILT_DEG = 45.0


@dataclass(frozen=True)
class HeadingVerdict:
    """
    How the car travelled relative to its mocap heading, at speeds over `MIN_SPEED`.

    moving: samples at speed; sideways: share of them travelling 45-135 degrees off the
    heading; backward: share travelling backward among those with a positive throttle (None
    without throttle or with too few); offset_deg: the circular mean travel direction
    relative to the heading, the yaw offset that would align the two; steering: the
    correlation of the yaw rate with steering x vx (positive steering turns left, REP 103;
    None without steering); pulled: share of the forward travel under a negative throttle
    (None without throttle or with too few); spinning: share of all samples turning faster
    than `MAX_YAW_RATE` (a yaw in degrees, named instead of a heading problem it causes);
    as_degrees: the car travels off its heading, the yaw goes beyond +-2 pi and, read as
    degrees, the car travels along it (a yaw in degrees on a car that barely turns, which
    `spinning` misses; a radian yaw offset on a car that drove along x reads so too).
    """

    moving: int
    sideways: float
    backward: Optional[float]
    offset_deg: float
    steering: Optional[float] = None
    pulled: Optional[float] = None
    spinning: float = 0.0
    as_degrees: bool = False

    def problem(self) -> Optional[str]:
        """Return why the heading is not the car's forward axis, or None."""
        found = self._heading_problem()
        if found is None:
            return None
        # A yaw in degrees turns 57 times too fast and points the heading anywhere.
        if self.spinning > UNIT_ERROR_SHARE:
            return (f'{self.spinning:.0%} of the samples turn faster than {MAX_YAW_RATE:g} '
                    'rad/s: yaw in degrees? Convert it to radians')
        if self.as_degrees:   # or a radian yaw that has turned: name both
            return (found + '. Or yaw in degrees? It goes beyond +-2 pi, and read as degrees '
                    'the car travels along its heading: then convert it to radians')
        return found

    def travels_off(self) -> bool:
        """Return whether the car travels sideways, or backward under positive throttle."""
        return self.moving >= MIN_MOVING and (
            self.sideways > MAX_OFF_SHARE
            or (self.backward is not None and self.backward > MAX_OFF_SHARE))

    def _heading_problem(self) -> Optional[str]:
        if self.moving < MIN_MOVING:
            return None
        if self.sideways > MAX_OFF_SHARE:
            how = f'sideways (45-135 deg off its heading) in {self.sideways:.0%}'
        elif self.backward is not None and self.backward > MAX_OFF_SHARE:
            how = f'backward under positive throttle in {self.backward:.0%}'
            if self.steering is not None and self.steering > STEERING_SURE:
                # A reversed heading would flip the yaw rate against steering x vx too.
                return (f'the car travels {how} of {self.moving} samples over {MIN_SPEED:g} '
                        'm/s while it turns the way its steering and heading say (yaw rate '
                        f'vs steering x vx: correlation {self.steering:.2f}): ' + THROTTLE_FIX)
        elif self.pulled is not None and self.pulled > MAX_OFF_SHARE:
            return (f'the car drives forward under a negative throttle in {self.pulled:.0%} of '
                    f'its forward travel over {MIN_SPEED:g} m/s: ' + THROTTLE_FIX)
        elif self.steering is not None and self.steering < -STEERING_SURE:
            return (f'the yaw rate turns against steering x vx (correlation '
                    f'{self.steering:.2f} over {self.moving} samples over {MIN_SPEED:g} m/s): '
                    'positive steering must turn left (REP 103); rdl car: --steering-scale '
                    'with the other sign')
        else:
            return None
        fix = self.suggested_offset_deg()
        return (f'the car travels {how} of {self.moving} samples over {MIN_SPEED:g} m/s, '
                f'at {self.offset_deg:+.0f} deg from the mocap heading on average: the pose '
                f"x axis is not the car's forward axis. Add {fix:g} deg to the yaw "
                f'(rdl car: --yaw-offset-deg {fix:g}; car_state_estimator: yaw_offset_deg '
                f'{fix:g}) or define the rigid body with x forward (a car that does drive '
                'so: rdl car --no-heading-check)')

    def suggested_offset_deg(self) -> float:
        """Return the yaw offset to add: the nearest quarter turn where within 15 deg of one."""
        quarter = 90.0 * round(self.offset_deg / 90.0)
        fix = quarter if abs(self.offset_deg - quarter) <= 15.0 else round(self.offset_deg)
        return -180.0 if fix == 180.0 else fix + 0.0


def judge_travel(vx: np.ndarray, vy: np.ndarray, throttle: Optional[np.ndarray] = None,
                 yaw_rate: Optional[np.ndarray] = None,
                 steering: Optional[np.ndarray] = None) -> HeadingVerdict:
    """Judge body-frame velocities (m/s; x along the mocap heading) against the commands."""
    vx, vy = np.asarray(vx, np.float64), np.asarray(vy, np.float64)
    moving = np.isfinite(vx) & np.isfinite(vy) & (np.hypot(vx, vy) > MIN_SPEED)
    angle = np.arctan2(vy[moving], vx[moving])
    off = np.abs(angle)
    sideways = float(np.mean((off >= ALONG) & (off <= math.pi - ALONG))) if angle.size else 0.0
    backward = pulled = None
    if throttle is not None:
        command = np.asarray(throttle, np.float64)[moving]
        pushed, ahead = command > 0, (off < ALONG) & np.isfinite(command)
        if pushed.sum() >= MIN_MOVING:
            backward = float(np.mean(off[pushed] > math.pi - ALONG))
        if ahead.sum() >= MIN_MOVING:
            pulled = float(np.mean(command[ahead] < 0))
    offset = math.degrees(math.atan2(np.sin(angle).sum(), np.cos(angle).sum())) \
        if angle.size else 0.0
    agreement = None
    if yaw_rate is not None and steering is not None and moving.sum() >= MIN_MOVING:
        turn = np.asarray(steering, np.float64)[moving] * vx[moving]
        rate = np.asarray(yaw_rate, np.float64)[moving]
        usable = np.isfinite(turn) & np.isfinite(rate)
        if usable.sum() >= MIN_MOVING and turn[usable].std() > 0 and rate[usable].std() > 0:
            agreement = float(np.corrcoef(turn[usable], rate[usable])[0, 1])
    return HeadingVerdict(int(moving.sum()), sideways, backward, offset, agreement, pulled)


def tilt_deg(quaternions: np.ndarray) -> np.ndarray:
    """Return the angle (deg) between the body z axis and the world z axis, (..., 4) [x,y,z,w]."""
    q = np.asarray(quaternions, np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    up = 1.0 - 2.0 * (q[..., 0] ** 2 + q[..., 1] ** 2)   # world z of the body z axis
    return np.degrees(np.arccos(np.clip(up, -1.0, 1.0)))


def tilt_problem(quaternions: np.ndarray) -> Optional[str]:
    """Return why poses whose body z axis is far from vertical have no yaw, or None."""
    if len(quaternions) == 0:
        return None
    median = float(np.median(tilt_deg(quaternions)))
    if median <= MAX_TILT_DEG:
        return None
    return (f"the mocap body's z axis is {median:.0f} deg from the world's z axis (median): "
            'the yaw about z means nothing. A Y-up mocap frame (OptiTrack Motive streams '
            'Y-up by default: set its up axis to Z) or a rigid body defined on its side? '
            'The package expects z up (REP 103)')


def body_velocity(drive: Trajectory) -> np.ndarray:
    """Return (T, 2) zero-phase body-frame velocities [vx, vy] of a drive [x, y, yaw]."""
    x, y, yaw = drive.observations[:, 0], drive.observations[:, 1], drive.observations[:, 2]
    vx, vy = (savgol_at_stamps(drive.time, p, VELOCITY_WINDOW_S, order=2, deriv=1)
              for p in (x, y))
    cos, sin = np.cos(yaw), np.sin(yaw)
    return np.stack([cos * vx + sin * vy, -sin * vx + cos * vy], axis=1)


def judge_drives(drives: Sequence[Trajectory]) -> HeadingVerdict:
    """Judge the travel of every finite stretch of the drives long enough to differentiate."""
    verdict = _judge_stretches(drives)
    beyond = any(np.any(np.abs(d.observations[:, 2]) > 2 * math.pi) for d in drives)
    if not beyond or not verdict.travels_off():
        return verdict
    radians = _judge_stretches([replace(d, observations=_yaw_scaled(d.observations,
                                                                    math.pi / 180.0))
                                for d in drives])
    return replace(verdict, as_degrees=radians.moving >= MIN_MOVING
                   and radians.sideways <= ALIGNED_SHARE
                   and (radians.backward or 0.0) <= ALIGNED_SHARE)


def _yaw_scaled(observations: np.ndarray, factor: float) -> np.ndarray:
    """Return a copy of [x, y, yaw, ...] observations with the yaw times `factor`."""
    scaled = np.array(observations, np.float64)
    scaled[:, 2] *= factor
    return scaled


def _judge_stretches(drives: Sequence[Trajectory]) -> HeadingVerdict:
    """Judge the drives as they are (see `judge_drives`)."""
    parts = []
    for drive in drives:
        finite = np.all(np.isfinite(drive.observations), axis=1)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], finite.astype(int), [0]])))
        for a, b in zip(edges[::2], edges[1::2]):
            piece = drive.segment(int(a), int(b))
            if b - a < 5 or piece.time[-1] - piece.time[0] < VELOCITY_WINDOW_S:
                continue
            commands = (piece.actions[:, :2] if piece.actions is not None
                        else np.full((len(piece), 2), np.nan))
            yaw_rate = savgol_at_stamps(piece.time, np.unwrap(piece.observations[:, 2]),
                                        VELOCITY_WINDOW_S, order=2, deriv=1)
            parts.append(np.column_stack([body_velocity(piece), commands, yaw_rate]))
    if not parts:
        return HeadingVerdict(0, 0.0, None, 0.0)
    stacked = np.concatenate(parts)
    verdict = judge_travel(stacked[:, 0], stacked[:, 1], stacked[:, 2], stacked[:, 4],
                           stacked[:, 3])
    return replace(verdict, spinning=float(np.mean(np.abs(stacked[:, 4]) > MAX_YAW_RATE)))


class TravelMonitor:
    """
    The same judgement on a live stream of estimates: the last `size` samples at speed.

    Why live too: a car_state_estimator fed a rigid body with x to the side makes the MPC
    steer a car it believes drives sideways; the log says so within seconds of driving.
    """

    def __init__(self, size: int = 500, every: int = 100) -> None:
        self.size, self.every = size, every
        self._samples = np.zeros((size, 3))
        self._count = 0
        self.flagged = False

    def add(self, vx: float, vy: float, throttle: Optional[float]) -> Optional[str]:
        """Add one estimate; return the problem when it first shows (None otherwise)."""
        if not math.hypot(vx, vy) > MIN_SPEED:
            return None
        self._samples[self._count % self.size] = (vx, vy, math.nan if throttle is None
                                                  else throttle)
        self._count += 1
        if self._count % self.every or self._count < MIN_MOVING:
            return None
        held = self._samples[:min(self._count, self.size)]
        problem = judge_travel(held[:, 0], held[:, 1], held[:, 2]).problem()
        flagged_now = problem is not None and not self.flagged
        self.flagged = problem is not None
        return problem if flagged_now else None
