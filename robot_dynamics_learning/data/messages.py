"""
Validated, duck-typed conversion of ROS messages to numpy (no rclpy needed).

The parsers read any object with the message's attributes: rclpy message classes in the
nodes and rosbags message classes in the bag reader, so live and recorded data pass the same
checks. A parser never raises on a bad message: it returns a `Result` with a `Reason` and
counts it in its `RejectionCounter`, because a node callback must skip bad input, not crash.

Units are those of the messages (SI: rad, rad/s, N m, m); stamps are integer nanoseconds.
"""
from collections import Counter
from dataclasses import dataclass
import enum
import math
from typing import (Callable, ClassVar, Dict, FrozenSet, Generic, List, Mapping, Optional,
                    Sequence, Tuple, TypeVar)

import numpy as np
from robot_dynamics_learning.params import build_from, check_ranges, setting

JOINT_STATE = 'sensor_msgs/msg/JointState'
POSE_STAMPED = 'geometry_msgs/msg/PoseStamped'
TWIST = 'geometry_msgs/msg/Twist'
TWIST_STAMPED = 'geometry_msgs/msg/TwistStamped'
JOY = 'sensor_msgs/msg/Joy'
FLOAT64_MULTI_ARRAY = 'std_msgs/msg/Float64MultiArray'
COMMAND_TYPES = (TWIST, TWIST_STAMPED, JOY)
# Motion capture and odometry poses: vrpn_mocap (PoseStamped), vicon_bridge and tf-style
# publishers (TransformStamped), pose estimators (PoseWithCovarianceStamped), odometry.
POSE_TYPES = (POSE_STAMPED, 'geometry_msgs/msg/TransformStamped',
              'geometry_msgs/msg/PoseWithCovarianceStamped', 'nav_msgs/msg/Odometry')
SUPPORTED_TYPES = (JOINT_STATE, *POSE_TYPES, TWIST, TWIST_STAMPED, JOY, FLOAT64_MULTI_ARRAY)
# car_state_estimator's pose_type names for POSE_TYPES, in that order.
POSE_TYPE_NAMES = dict(zip(('pose_stamped', 'transform_stamped',
                            'pose_with_covariance_stamped', 'odometry'), POSE_TYPES))

T = TypeVar('T')


class Reason(str, enum.Enum):
    """Why a message was rejected; the values are short stable strings for logs and JSON."""

    MALFORMED = 'malformed'              # an attribute is missing or of the wrong type
    NON_FINITE = 'non_finite'            # NaN or inf in a value that is used
    ARRAY_LENGTH = 'array_length'        # a non-empty array whose length differs from `name`
    DUPLICATE_JOINT = 'duplicate_joint'  # a joint name appears twice in `name`
    MISSING_JOINT = 'missing_joint'      # an expected joint is not in `name`
    MISSING_FIELD = 'missing_field'      # a required array (position/velocity/effort) is empty
    ZERO_STAMP = 'zero_stamp'            # header stamp is 0 (publisher never set it)
    NEGATIVE_STAMP = 'negative_stamp'    # header stamp before 1970 (sec < 0)
    FUTURE_STAMP = 'future_stamp'        # stamp further ahead of the receiver's clock than allowed
    OLD_STAMP = 'old_stamp'              # stamp further behind the receiver's clock than allowed
    STAMP_BACKWARDS = 'stamp_backwards'  # stamp earlier than the last accepted one
    STAMP_REPEATED = 'stamp_repeated'    # stamp equal to the last accepted one
    BAD_QUATERNION = 'bad_quaternion'    # orientation norm far from 1
    MISSING_AXIS = 'missing_axis'        # Joy has fewer axes than the mapping needs
    WRONG_SIZE = 'wrong_size'            # Float64MultiArray of unexpected length
    OUT_OF_RANGE = 'out_of_range'        # finite, but far beyond any real robot's values


@dataclass(frozen=True)
class Result(Generic[T]):
    """A parsed value, or the reason (and a human-readable detail) it was rejected."""

    value: Optional[T] = None
    reason: Optional[Reason] = None
    detail: str = ''

    @property
    def ok(self) -> bool:
        """Return True when the message was accepted."""
        return self.reason is None


def _reject(reason: Reason, detail: str) -> Result:
    return Result(reason=reason, detail=detail)


class RejectionCounter:
    """Counts accepted messages and rejections per reason; keeps the latest detail per reason."""

    def __init__(self) -> None:
        self.accepted = 0
        self.rejected: Dict[Reason, int] = {}
        self.last_detail: Dict[Reason, str] = {}

    def count(self, result: Result) -> Result:
        """Record one result and return it unchanged."""
        if result.reason is None:
            self.accepted += 1
        else:
            self.rejected[result.reason] = self.rejected.get(result.reason, 0) + 1
            self.last_detail[result.reason] = result.detail
        return result

    def reject_accepted(self, reason: Reason, count: int, detail: str) -> None:
        """Count `count` accepted messages as rejected for `reason`: a later check refused them."""
        self.accepted -= count
        self.rejected[reason] = self.rejected.get(reason, 0) + count
        self.last_detail[reason] = detail

    @property
    def total_rejected(self) -> int:
        """Return the number of rejected messages over all reasons."""
        return sum(self.rejected.values())

    def as_dict(self) -> Dict[str, int]:
        """Return {'accepted': n, '<reason>': n, ...} with reasons as their string values."""
        out = {'accepted': self.accepted}
        out.update({reason.value: n for reason, n in sorted(self.rejected.items())})
        return out

    def summary(self) -> str:
        """One line for logs, e.g. 'accepted 99, rejected 1 (non_finite 1)'."""
        reasons = ', '.join(f'{r.value} {n}' for r, n in sorted(self.rejected.items()))
        text = f'accepted {self.accepted}, rejected {self.total_rejected}'
        return f'{text} ({reasons})' if reasons else text


class FieldNeed(str, enum.Enum):
    """How a parser treats one JointState array (position, velocity or effort)."""

    IGNORE = 'ignore'        # never read or checked
    OPTIONAL = 'optional'    # used when non-empty; an empty array gives None
    REQUIRED = 'required'    # an empty array rejects the message (Reason.MISSING_FIELD)


def stamp_to_ns(stamp: object) -> int:
    """Return a builtin_interfaces/Time (sec, nanosec) as integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


# Backwards stamps in a row, moving forward among themselves, that relock a `StampCheck`.
RELOCK_AFTER = 10


@dataclass(frozen=True)
class StampBounds:
    """
    Where a live receiver's stamps may lie, judged against its own clock.

    clock: the receiver's time in ns (a node's clock: sim time under use_sim_time); None
    disables max_future_ns and max_age_ns (recorded data has no "now").
    max_future_ns: a stamp further ahead is refused (it would hide every real message after
    it as backwards). max_age_ns: a stamp further behind is refused. None: no bound.
    reset_after_ns: a stamp this far behind the last accepted one is a time reset (looping
    bag, restarted simulation) instead of a backwards stamp; the sample is flagged
    `time_reset` once the whole message is valid, so a rejected message never resets state.
    relock_after: this many backwards stamps in a row, each after the one before it, are a
    time reset too: the last accepted stamp was the odd one (a lone stamp far ahead, which
    would otherwise hide every later message as backwards) or time restarted by less than
    reset_after_ns. None (default): never; set it only where `time_reset` restarts the
    consumer's state, since the stamps it passes on then go back in time.
    ordered: False lets stamps come in any order (zero and negative ones are still refused),
    for a reader that holds the whole recording and orders it afterwards (`bag_io`): a running
    check keeps a lone stamp far ahead and refuses every later one as backwards.
    """

    clock: Optional[Callable[[], int]] = None
    max_future_ns: Optional[int] = None
    max_age_ns: Optional[int] = None
    reset_after_ns: Optional[int] = None
    relock_after: Optional[int] = None
    ordered: bool = True


class StampCheck:
    """
    Stateful check that header stamps are positive, within `StampBounds`, and move forward.

    Only accepted stamps advance the state, so one bad message does not poison the next.
    `StampBounds.ordered` False leaves the order to the caller.
    Call `reset()` when time legitimately jumps back (bag loop, simulation reset); a jump of
    `StampBounds.reset_after_ns`, or `relock_after` backwards stamps in a row, count as one.
    """

    def __init__(self, allow_repeated: bool = False, bounds: StampBounds = StampBounds()
                 ) -> None:
        self.allow_repeated = allow_repeated
        self.bounds = bounds
        self.last_ns: Optional[int] = None
        self._backwards: List[int] = []   # the run of backwards stamps since the last accepted

    def check(self, stamp_ns: int) -> Optional[Result]:
        """Return None when stamp_ns is acceptable, else the rejection."""
        if stamp_ns == 0:
            return _reject(Reason.ZERO_STAMP, 'header stamp is 0: the publisher leaves it '
                           'unset (stamp each message, e.g. get_clock().now().to_msg())')
        if stamp_ns < 0:
            return _reject(Reason.NEGATIVE_STAMP, f'stamp {stamp_ns} ns is before 1970')
        b = self.bounds
        if b.clock is not None and (b.max_future_ns is not None or b.max_age_ns is not None):
            ahead = stamp_ns - int(b.clock())
            if b.max_future_ns is not None and ahead > b.max_future_ns:
                return _reject(Reason.FUTURE_STAMP, f'stamp {ahead * 1e-9:.3f} s ahead of the '
                               f'clock (at most {b.max_future_ns * 1e-9:g} s)')
            if b.max_age_ns is not None and -ahead > b.max_age_ns:
                return _reject(Reason.OLD_STAMP, f'stamp {-ahead * 1e-9:.3f} s behind the '
                               f'clock (at most {b.max_age_ns * 1e-9:g} s)')
        if b.ordered and self.last_ns is not None and not self.is_reset(stamp_ns):
            if stamp_ns < self.last_ns:
                if self._backwards and stamp_ns <= self._backwards[-1]:
                    self._backwards.clear()   # not a run moving forward: no relock
                self._backwards.append(stamp_ns)
                if self._relocks():
                    return None
                return _reject(Reason.STAMP_BACKWARDS,
                               f'stamp {stamp_ns} ns < previous {self.last_ns} ns')
            # Consumers hand stamps on as float seconds (differentiators, sample buffers): near
            # today's epoch those resolve about 0.24 us, so a stamp a few ns later is the same.
            if stamp_ns * 1e-9 <= self.last_ns * 1e-9 and not self.allow_repeated:
                return _reject(Reason.STAMP_REPEATED, f'stamp {stamp_ns} ns repeated (within '
                               'the resolution of float seconds)')
        return None

    def is_reset(self, stamp_ns: int) -> bool:
        """Return True when stamp_ns lies reset_after_ns behind the last one, or ends a relock."""
        reset_after = self.bounds.reset_after_ns
        if self.last_ns is None or stamp_ns >= self.last_ns:
            return False
        return ((reset_after is not None and self.last_ns - stamp_ns >= reset_after)
                or (self._relocks() and self._backwards[-1] == stamp_ns))

    def _relocks(self) -> bool:
        """Return True when the run of backwards stamps is long enough to relock."""
        relock = self.bounds.relock_after
        return relock is not None and len(self._backwards) >= relock

    def accept(self, stamp_ns: int) -> None:
        """Advance the state to an accepted stamp."""
        self.last_ns = stamp_ns
        self._backwards.clear()

    def reset(self) -> None:
        """Forget the last stamp."""
        self.last_ns = None
        self._backwards.clear()


# Stamp rejections returned before the values are read (the message is unusable anyway).
_EARLY = (Reason.ZERO_STAMP, Reason.NEGATIVE_STAMP)
# Where a message's time comes from (`stamp_source` of the arm nodes, car_state_estimator
# and `rdl replay`).
STAMP_SOURCES = ('auto', 'header', 'receipt')


def check_stamp_source(source: str) -> None:
    """Refuse an unknown stamp_source, naming the choices."""
    if source not in STAMP_SOURCES:
        raise ValueError(f'stamp_source must be one of {STAMP_SOURCES}, got {source!r}')


class StampSource:
    """
    A message's time: its header stamp, or when it arrived, for drivers that never stamp.

    Some drivers (micro-ROS and serial bridges among them) leave header.stamp at 0, and every
    message was refused (zero_stamp). header: the header stamp, 0 refused; receipt: the
    arrival time always (its jitter enters the derivatives); auto: decided by the first
    message, for good: a stamp of 0 there means arrival times (`switched`), any other means
    header stamps, and a later 0 is refused as a glitch. Mixing the two would put arrival
    times, which lag, among header stamps.
    """

    def __init__(self, source: str = 'header') -> None:
        check_stamp_source(source)
        self.source = source
        self.receipt = source == 'receipt'
        self.decided = source != 'auto'
        self.switched = False   # auto chose arrival times
        self._told = False

    @property
    def wants_arrival(self) -> bool:
        """Return True while arrival times may be used (the caller then passes them)."""
        return self.receipt or not self.decided

    def stamp_ns(self, header_ns: int, arrival_ns: Optional[int]) -> int:
        """Return the time to use for a message stamped header_ns that arrived at arrival_ns."""
        if not self.decided:
            self.decided = True
            self.receipt = self.switched = header_ns == 0 and arrival_ns is not None
        return arrival_ns if self.receipt and arrival_ns is not None else header_ns

    def news(self) -> bool:
        """Return True once, after auto switched to arrival times (for one log line)."""
        fresh, self._told = self.switched and not self._told, self._told or self.switched
        return fresh


class _Parser:
    """Shared plumbing: exception safety, counting, and the stamp check."""

    def __init__(self, check_stamps: bool, allow_repeated_stamps: bool,
                 bounds: StampBounds = StampBounds(), stamp_source: str = 'header') -> None:
        self.counter = RejectionCounter()
        self.stamps = StampCheck(allow_repeated_stamps, bounds) if check_stamps else None
        self.times = StampSource(stamp_source)
        self._arrival_ns: Optional[int] = None

    def parse(self, msg: object, arrival_ns: Optional[int] = None) -> Result:
        """
        Parse one message; never raises (a malformed object is a rejection).

        arrival_ns: when it arrived (receiver's clock, or a bag's log time), for parsers that
        may stamp a message with it (`StampSource`).
        """
        self._arrival_ns = arrival_ns
        try:
            result = self._parse(msg)
        except (AttributeError, TypeError, ValueError, IndexError, OverflowError) as error:
            result = _reject(Reason.MALFORMED, f'{type(error).__name__}: {error}')
        return self.counter.count(result)

    __call__ = parse

    def _parse(self, msg: object) -> Result:
        raise NotImplementedError

    def _check_stamp(self, stamp_ns: int) -> Optional[Result]:
        return None if self.stamps is None else self.stamps.check(stamp_ns)

    def _timed(self, msg: object) -> Tuple[int, Optional[Result]]:
        """Return the message's time (`StampSource`) and its stamp rejection, or None."""
        stamp_ns = self.times.stamp_ns(stamp_to_ns(msg.header.stamp), self._arrival_ns)
        bad = self._check_stamp(stamp_ns)
        if bad is not None and bad.reason == Reason.ZERO_STAMP:
            bad = _reject(Reason.ZERO_STAMP, f'{bad.detail}; or set stamp_source: receipt to '
                          'use arrival times')
        return stamp_ns, bad

    def _accept_stamp(self, stamp_ns: int) -> bool:
        """Advance to an accepted stamp; return True when it is a time reset."""
        if self.stamps is None:
            return False
        reset = self.stamps.is_reset(stamp_ns)
        self.stamps.accept(stamp_ns)
        return reset

    def reset(self) -> None:
        """Forget stamp history (counts are kept)."""
        if self.stamps is not None:
            self.stamps.reset()


@dataclass(frozen=True)
class JointSample:
    """
    One JointState in the parser's joint order: arrays (n,) or None where not present.

    time_reset: the stamp jumped back by `StampBounds.reset_after_ns` or more (the message
    is otherwise valid): the receiver resets its time-dependent state before using it.
    """

    stamp_ns: int
    position: Optional[np.ndarray]
    velocity: Optional[np.ndarray]
    effort: Optional[np.ndarray]
    time_reset: bool = False


class JointStateParser(_Parser):
    """
    sensor_msgs/JointState -> `JointSample`, joints matched by name, never by index.

    joint_names fixes the output order; extra joints in a message are ignored (their values
    are not checked); None adopts the name list of the first message with a valid one. Each
    array is handled per its `FieldNeed`. Rejections: duplicate or missing joints, a non-empty
    array whose length differs from `name`, a required array empty, NaN/inf in a used value,
    zero or non-increasing header stamps (when check_stamps). stamp_source: header stamps
    or arrival times (`StampSource`; arrival times come with `parse`).
    """

    FIELDS = ('position', 'velocity', 'effort')

    def __init__(self, joint_names: Optional[Sequence[str]] = None,
                 position: FieldNeed = FieldNeed.REQUIRED,
                 velocity: FieldNeed = FieldNeed.OPTIONAL,
                 effort: FieldNeed = FieldNeed.OPTIONAL,
                 check_stamps: bool = True, allow_repeated_stamps: bool = False,
                 bounds: StampBounds = StampBounds(), stamp_source: str = 'header') -> None:
        super().__init__(check_stamps, allow_repeated_stamps, bounds, stamp_source)
        if joint_names is not None:
            joint_names = [str(name) for name in joint_names]
            if len(set(joint_names)) != len(joint_names) or not joint_names:
                raise ValueError(f'joint_names must be unique and non-empty: {joint_names}')
        self.joint_names = joint_names
        self.needs = {'position': FieldNeed(position), 'velocity': FieldNeed(velocity),
                      'effort': FieldNeed(effort)}
        if all(need == FieldNeed.IGNORE for need in self.needs.values()):
            raise ValueError('at least one of position, velocity, effort must be used')
        # Message name tuple -> index array (or a rejection); messages usually repeat one order.
        self._index_cache: Dict[Tuple[str, ...], object] = {}

    def _indices(self, names: Tuple[str, ...]) -> object:
        cached = self._index_cache.get(names)
        if cached is not None:
            return cached
        counts = Counter(names)   # linear: a 10k-name message must not stall the callback
        if len(counts) != len(names):
            dup = sorted(n for n, k in counts.items() if k > 1)[:10]
            result: object = _reject(Reason.DUPLICATE_JOINT, f'duplicated joints {dup}')
        else:
            lookup = {name: i for i, name in enumerate(names)}
            missing = [n for n in self.joint_names if n not in lookup]
            if missing:
                result = _reject(Reason.MISSING_JOINT, f'missing joints {missing}')
            else:
                result = np.array([lookup[n] for n in self.joint_names], dtype=np.intp)
        if len(self._index_cache) < 64:
            self._index_cache[names] = result
        return result

    def _parse(self, msg: object) -> Result:
        names = tuple(msg.name)
        if self.joint_names is None:
            if not names or len(set(names)) != len(names):
                return _reject(Reason.DUPLICATE_JOINT if names else Reason.MISSING_JOINT,
                               f'cannot adopt joint names {list(names)}')
            self.joint_names = [str(n) for n in names]
        index = self._indices(names)
        if isinstance(index, Result):
            return index
        stamp_ns, bad_stamp = self._timed(msg)
        if bad_stamp is not None and bad_stamp.reason in _EARLY:
            return bad_stamp
        values = {}
        for field in self.FIELDS:
            need = self.needs[field]
            if need == FieldNeed.IGNORE:
                values[field] = None
                continue
            raw = np.asarray(getattr(msg, field), dtype=np.float64)
            if raw.ndim != 1:
                return _reject(Reason.MALFORMED, f'{field} is not a 1-D array')
            if raw.size == 0:
                if need == FieldNeed.REQUIRED:
                    return _reject(Reason.MISSING_FIELD,
                                   f'{field} is empty{_EMPTY_HINTS.get(field, "")}')
                values[field] = None
                continue
            if raw.size != len(names):
                return _reject(Reason.ARRAY_LENGTH,
                               f'{field} has {raw.size} values for {len(names)} names')
            selected = raw[index]
            if not np.isfinite(selected).all():
                return _reject(Reason.NON_FINITE, f'{field} has non-finite values')
            values[field] = selected
        if bad_stamp is not None:
            return bad_stamp
        reset = self._accept_stamp(stamp_ns)
        return Result(JointSample(stamp_ns, values['position'], values['velocity'],
                                  values['effort'], reset))


# What to do about a driver that leaves an array empty, where there is something to do.
_EMPTY_HINTS = {'velocity': ' (the driver publishes none: velocity_source auto or positions '
                            'differentiates the positions)'}


# A joint set must come in this share of a topic's messages (and twice) to be chosen.
JOINT_SET_MIN_SHARE = 0.01


def choose_joint_set(counts: Mapping[Tuple[str, ...], int]) -> Tuple[str, ...]:
    """
    Return the joint set to read from a topic that carries several: the one with most joints.

    Two publishers may share /joint_states (an arm's and a gripper's joint_state_broadcaster):
    the first message must not decide. counts: each set (names in its first message's order)
    -> its messages. Only sets seen twice and in `JOINT_SET_MIN_SHARE` of the messages count,
    so one garbled message of many names cannot win; ties go to the most messages.
    """
    total = sum(counts.values())
    eligible = {names: n for names, n in counts.items()
                if n >= max(2, JOINT_SET_MIN_SHARE * total)} or counts
    return max(eligible, key=lambda names: (len(names), eligible[names]))


class JointSetTally:
    """
    Messages per joint set, each named in its first message's order, for `choose_joint_set`.

    At most `most_sets` distinct sets are kept: messages of random names must not grow it.
    """

    def __init__(self, most_sets: int = 64) -> None:
        self.most_sets = most_sets
        self._sets: Dict[FrozenSet[str], List] = {}   # set -> [names in first order, count]

    def add(self, names: Sequence[str]) -> None:
        """Count one message carrying `names`."""
        key = frozenset(names)
        entry = self._sets.get(key)
        if entry is None:
            if len(self._sets) >= self.most_sets:
                return
            entry = self._sets[key] = [tuple(names), 0]
        entry[1] += 1

    def counts(self) -> Dict[Tuple[str, ...], int]:
        """Return {names (first order): messages}."""
        return dict(self._sets.values())

    def __len__(self) -> int:
        """Return the number of distinct joint sets counted."""
        return len(self._sets)


# joint_names unset: a larger joint set is not adopted (a garbage message of 100k names would
# become a model of 300k inputs), and at most this many messages wait for the choice.
MAX_ADOPTED_JOINTS = 128
MAX_SETTLING_MESSAGES = 5000


class JointSetChoice:
    """
    Chooses the joints to read when joint_names is unset: the largest set that keeps arriving.

    Two publishers may share /joint_states (an arm's and a gripper's broadcaster): the first
    message's set would win by start order. Messages of the first `settle_s` (from the first
    offered one, or until `MAX_SETTLING_MESSAGES`) are held; then `choose_joint_set` picks (the
    most joints among the sets seen twice and in 1 % of the messages, as bags are read), and
    the held messages are handed back to be used, so none is lost (dynamics_learner, and
    `learning.replay.StreamRecorder` as it reads a bag for `rdl replay`).
    """

    def __init__(self, settle_s: float) -> None:
        self.settle_s = settle_s
        self.started: Optional[float] = None
        self.seen = JointSetTally()
        self.held: List[object] = []

    def offer(self, msg: object, now: float, names: Optional[Sequence[str]] = None
              ) -> Optional[Result]:
        """
        Hold `msg`; return its rejection when its names cannot be a joint set to adopt.

        names: the JointState names when `msg` is not the message itself (a (msg, time) pair).
        """
        names = tuple(str(name) for name in (msg.name if names is None else names))
        key = frozenset(names)
        if not names or len(key) != len(names):
            return Result(reason=Reason.DUPLICATE_JOINT if names else Reason.MISSING_JOINT,
                          detail=f'cannot adopt joint names {list(names)[:20]}')
        if len(names) > MAX_ADOPTED_JOINTS:
            return Result(reason=Reason.MALFORMED, detail=f'{len(names)} joints: more than '
                          f'{MAX_ADOPTED_JOINTS} are not adopted (set joint_names)')
        if self.started is None:
            self.started = now
        self.seen.add(names)
        self.held.append(msg)
        return None

    def ready(self, now: float) -> bool:
        """Return True once the settling window has passed (or the held messages fill it)."""
        return self.started is not None and (now - self.started >= self.settle_s
                                             or len(self.held) >= MAX_SETTLING_MESSAGES)

    def choose(self) -> Tuple[Tuple[str, ...], List[Tuple[Tuple[str, ...], int]]]:
        """Return the adopted names (`choose_joint_set`) and the other (names, count) seen."""
        counts = self.seen.counts()
        chosen = choose_joint_set(counts)
        return chosen, [(names, n) for names, n in counts.items() if names != chosen]

    def take_held(self) -> List[object]:
        """Return the held messages in arrival order and forget them."""
        held, self.held = self.held, []
        return held


def yaw_from_quaternion(x: float, y: float, z: float, w: float) -> float:
    """
    Return the yaw (rad, in (-pi, pi]) of quaternion [x, y, z, w] (ZYX Euler order).

    The homogeneous form atan2(2(wz + xy), w^2 + x^2 - y^2 - z^2) ignores the norm, so a
    slightly non-unit quaternion gives the yaw of its normalised version.
    """
    return math.atan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z)


def quaternion_from_yaw(yaw: np.ndarray) -> np.ndarray:
    """Return (..., 4) unit quaternions [x, y, z, w] for rotations by yaw (rad) about z."""
    yaw = np.asarray(yaw, dtype=np.float64)
    out = np.zeros(yaw.shape + (4,))
    out[..., 2] = np.sin(0.5 * yaw)
    out[..., 3] = np.cos(0.5 * yaw)
    return out


@dataclass(frozen=True)
class PoseSample:
    """
    A PoseStamped: position (3,) in m, quaternion (4,) [x, y, z, w] as sent, yaw in rad.

    time_reset: time went back (`StampBounds`): whatever was estimated before must restart.
    """

    stamp_ns: int
    frame_id: str
    position: np.ndarray
    quaternion: np.ndarray
    yaw: float
    time_reset: bool = False


# A pose farther from its frame's origin is garbage, not a place (UTM northings reach 1e7 m):
# a mocap pose at 1e300 m gave velocities of 1e286 m/s.
POSITION_LIMIT = 1e8


class PoseParser(_Parser):
    """
    A stamped pose (`POSE_TYPES`) -> `PoseSample` (frame as in the message).

    The quaternion's norm must be within quaternion_tolerance of 1 (a zero or garbage
    orientation is rejected, not normalised into a wrong yaw); it is kept as sent, so poses
    round-trip through bags bit-exactly. stamp_source: header stamps or arrival times
    (`StampSource`).
    """

    def __init__(self, check_stamps: bool = True, allow_repeated_stamps: bool = False,
                 quaternion_tolerance: float = 1e-2, bounds: StampBounds = StampBounds(),
                 stamp_source: str = 'header') -> None:
        super().__init__(check_stamps, allow_repeated_stamps, bounds, stamp_source)
        self.quaternion_tolerance = float(quaternion_tolerance)

    def _parse(self, msg: object) -> Result:
        stamp_ns, bad_stamp = self._timed(msg)
        if bad_stamp is not None and bad_stamp.reason in _EARLY:
            return bad_stamp
        p, o = _position_and_orientation(msg)
        position = np.array([p.x, p.y, p.z], dtype=np.float64)
        quaternion = np.array([o.x, o.y, o.z, o.w], dtype=np.float64)
        if not (np.isfinite(position).all() and np.isfinite(quaternion).all()):
            return _reject(Reason.NON_FINITE, 'pose has non-finite values')
        if np.abs(position).max() > POSITION_LIMIT:
            return _reject(Reason.OUT_OF_RANGE, f'position {position.tolist()} m is beyond '
                           f'{POSITION_LIMIT:g} m of the origin')
        norm = float(np.sqrt(quaternion @ quaternion))
        if abs(norm - 1.0) > self.quaternion_tolerance:
            return _reject(Reason.BAD_QUATERNION, f'quaternion norm {norm:.6g}')
        if bad_stamp is not None:
            return bad_stamp
        reset = self._accept_stamp(stamp_ns)
        return Result(PoseSample(stamp_ns, str(msg.header.frame_id), position, quaternion,
                                 yaw_from_quaternion(*quaternion), reset))


def _position_and_orientation(msg: object) -> Tuple[object, object]:
    """Return the (position, orientation) of any of `POSE_TYPES`, told apart by attributes."""
    if hasattr(msg, 'transform'):   # TransformStamped
        return msg.transform.translation, msg.transform.rotation
    pose = msg.pose.pose if hasattr(msg.pose, 'pose') else msg.pose   # with covariance
    return pose.position, pose.orientation


MIN_SCALE = 1e-3   # command scales in [1e-3, 1e3]: 1e-300 would send 0.5 throttle as 5e299
# A car command is normalised to [-1, 1]; one 10 times beyond is a wrong scale or garbage (a
# steering of 1e100 overflowed the yaw filter's cubic term).
COMMAND_LIMIT = 10.0


@dataclass(frozen=True)
class CommandMapping:
    """
    How Twist, TwistStamped and Joy map to the car command (throttle, steering).

    Twist: throttle = throttle_scale * linear.x, steering = steering_scale * angular.z.
    Joy: throttle = throttle_scale * axes[throttle_axis], steering likewise with
    steering_axis. With scales 1 the command is the normalised DART one: throttle in [0, 1],
    steering in [-1, 1].
    """

    throttle_axis: int = setting(1, 'Joy axis of the throttle', 0, 64)
    steering_axis: int = setting(3, 'Joy axis of the steering', 0, 64)
    throttle_scale: float = setting(1.0, 'throttle = throttle_scale * linear.x (or the Joy '
                                    'axis); magnitude in [1e-3, 1e3]')
    steering_scale: float = setting(1.0, 'steering = steering_scale * angular.z (or the Joy '
                                    'axis); magnitude in [1e-3, 1e3]')

    def __post_init__(self) -> None:
        """Reject mappings that could only produce wrong commands."""
        check_ranges(self)
        for name in ('throttle_scale', 'steering_scale'):
            value = float(getattr(self, name))
            if not MIN_SCALE <= abs(value) <= 1.0 / MIN_SCALE:   # also refuses NaN
                raise ValueError(f'{name} must have a magnitude in [{MIN_SCALE:g}, '
                                 f'{1.0 / MIN_SCALE:g}], got {value}')


CAR_COMMAND_TYPES = ('twist', 'twist_stamped', 'joy')


@dataclass(frozen=True)
class CarCommandSettings(CommandMapping):
    """
    How a car node takes its `command` topic: the message type and the mapping.

    The base of the car nodes' config classes (car_sim, car_state_estimator,
    car_model_learner), so the five settings read the same in each.
    """

    command_types: ClassVar[Tuple[str, ...]] = CAR_COMMAND_TYPES
    command_type: str = setting('twist', f'command message type: {list(CAR_COMMAND_TYPES)}')

    def __post_init__(self) -> None:
        """Refuse an unknown message type and a mapping that cannot work."""
        super().__post_init__()
        if self.command_type not in self.command_types:
            raise ValueError(f'command_type must be one of {list(self.command_types)}, got '
                             f'{self.command_type!r}')

    def mapping(self) -> CommandMapping:
        """Return the mapping alone."""
        return build_from(CommandMapping, self)


@dataclass(frozen=True)
class CarCommand:
    """A car command; stamp_ns is None for unstamped Twist (use the receive time)."""

    stamp_ns: Optional[int]
    throttle: float
    steering: float


class CarCommandParser(_Parser):
    """Twist, TwistStamped or Joy (told apart by their attributes) -> `CarCommand`."""

    def __init__(self, mapping: CommandMapping = CommandMapping(), check_stamps: bool = True,
                 allow_repeated_stamps: bool = False, bounds: StampBounds = StampBounds()
                 ) -> None:
        super().__init__(check_stamps, allow_repeated_stamps, bounds)
        self.mapping = mapping

    def _parse(self, msg: object) -> Result:
        m = self.mapping
        stamp_ns = None
        if hasattr(msg, 'header'):
            stamp_ns = stamp_to_ns(msg.header.stamp)
            bad_stamp = self._check_stamp(stamp_ns)
            if bad_stamp is not None and bad_stamp.reason in _EARLY:
                return bad_stamp
        if hasattr(msg, 'axes'):
            axes = np.asarray(msg.axes, dtype=np.float64)
            need = max(m.throttle_axis, m.steering_axis) + 1
            if axes.ndim != 1 or axes.size < need:
                return _reject(Reason.MISSING_AXIS, f'Joy has {axes.size} axes, need {need}')
            raw_throttle, raw_steering = axes[m.throttle_axis], axes[m.steering_axis]
        else:
            twist = msg.twist if hasattr(msg, 'twist') else msg
            raw_throttle, raw_steering = float(twist.linear.x), float(twist.angular.z)
        throttle = float(m.throttle_scale * raw_throttle)
        steering = float(m.steering_scale * raw_steering)
        if not (math.isfinite(throttle) and math.isfinite(steering)):
            return _reject(Reason.NON_FINITE, 'command has non-finite values')
        if max(abs(throttle), abs(steering)) > COMMAND_LIMIT:
            return _reject(Reason.OUT_OF_RANGE, f'command (throttle {throttle:g}, steering '
                           f'{steering:g}) is over {COMMAND_LIMIT:g} times the normalised range '
                           '[-1, 1]: check throttle_scale and steering_scale')
        if stamp_ns is not None:
            if bad_stamp is not None:
                return bad_stamp
            self._accept_stamp(stamp_ns)
        return Result(CarCommand(stamp_ns, throttle, steering))


class ArrayParser(_Parser):
    """
    std_msgs/Float64MultiArray -> (m,) float64 array (after layout.data_offset).

    size, when given, is the required length (e.g. the number of joints of an effort
    controller). The message has no header, so there is no stamp check.
    """

    def __init__(self, size: Optional[int] = None) -> None:
        super().__init__(check_stamps=False, allow_repeated_stamps=False)
        if size is not None and size < 1:
            raise ValueError(f'size must be >= 1, got {size}')
        self.size = size

    def _parse(self, msg: object) -> Result:
        offset = int(msg.layout.data_offset)
        data = np.array(msg.data, dtype=np.float64)[offset:]
        if data.ndim != 1:
            return _reject(Reason.MALFORMED, 'data is not a 1-D array')
        if self.size is not None and data.size != self.size:
            return _reject(Reason.WRONG_SIZE, f'{data.size} values, expected {self.size}')
        if not np.isfinite(data).all():
            return _reject(Reason.NON_FINITE, 'data has non-finite values')
        return Result(data)
