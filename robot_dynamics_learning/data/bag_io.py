"""
rosbag2 read and write without a ROS install (the `rosbags` library).

Reading: one topic -> `TopicArrays` (preallocated numpy arrays, header stamps and receive
times), every message validated by the same parsers the nodes use (`data/messages.py`);
invalid messages are skipped and counted by reason; header stamps are ordered over the whole
topic (`ordered_rows`). Types come from the bag itself (Jazzy and later embed definitions);
bags without definitions (Humble's `ros2 bag`) fall back to a named typestore. Writing:
version-8 bags (readable by Humble and later), sqlite3 or MCAP, from `Trajectory` objects or
`TopicArrays`, with the dataset topic conventions in docs/data.md.
"""
from contextlib import contextmanager
from dataclasses import dataclass, field
import heapq
import logging
from pathlib import Path
import shutil
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from robot_dynamics_learning.data import datasets
from robot_dynamics_learning.data.car_heading import tilt_problem
from robot_dynamics_learning.data.messages import (
    ArrayParser, CarCommandParser, choose_joint_set, CommandMapping, FieldNeed,
    FLOAT64_MULTI_ARRAY, JOINT_STATE, JointSetTally, JointStateParser, JOY, POSE_STAMPED,
    POSE_TYPES, PoseParser, quaternion_from_yaw, Reason, RELOCK_AFTER, Result, StampBounds,
    SUPPORTED_TYPES, TWIST, TWIST_STAMPED)
from robot_dynamics_learning.data.trajectory import Trajectory
from rosbags.highlevel import AnyReader, AnyReaderError
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from rosbags.typesys import get_typestore, Stores
from tqdm import tqdm

PathLike = Union[str, Path]
STORAGES = {'mcap': StoragePlugin.MCAP, 'sqlite3': StoragePlugin.SQLITE3}
TYPESTORES = {'humble': Stores.ROS2_HUMBLE, 'jazzy': Stores.ROS2_JAZZY,
              'kilted': Stores.ROS2_KILTED}
# Dataset bags start at this fixed epoch (2023-11-14T22:13:20Z) so conversions are repeatable.
EPOCH_NS = 1_700_000_000 * 1_000_000_000
JOINT_TOPIC = '/joint_states'
LOG = logging.getLogger(__name__)
PNEUMATIC_COMMAND_TOPIC = '/pressure_controller/commands'
SCHUNK_COMMAND_TOPIC = '/effort_controller/commands'
CAR_POSE_TOPIC = '/vrpn_mocap/rc_car/pose'
CAR_COMMAND_TYPES = (JOY, TWIST, TWIST_STAMPED)
CAR_COMMAND_TOPIC = '/cmd'
DATASETS = ('kinova', 'pneumatic', 'schunk', 'rc_car')
# A header stamp this far behind the stamps before it is a time reset (the nodes' time_reset_s).
TIME_RESET_NS = 500_000_000
# The bag parsers leave the order of stamps to `ordered_rows`, which sees the whole topic.
UNORDERED = StampBounds(ordered=False)


def named_typestore(name: str):
    """Return the rosbags typestore for 'humble', 'jazzy' or 'kilted'."""
    if name not in TYPESTORES:
        raise ValueError(f"unknown typestore '{name}', choose from {sorted(TYPESTORES)}")
    return get_typestore(TYPESTORES[name])


@contextmanager
def open_bag(path: PathLike, typestore: str = 'jazzy') -> Iterator[AnyReader]:
    """Open a rosbag2 folder for reading; typestore is used only if the bag has no types."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f'no bag at {path}')
    if path.is_dir() and not (path / 'metadata.yaml').is_file():
        raise ValueError(f'{path}: {_not_a_bag(path)}')
    try:   # a file, not a bag folder, fails already in the constructor
        reader = AnyReader([path], default_typestore=named_typestore(typestore))
        reader.open()
    except AnyReaderError as error:
        hint = (f'; a recording cut short? `rdl bag recover {path} --out FIXED` keeps its '
                'intact messages' if 'magic' in str(error).lower() else '')
        raise ValueError(f"{path}: cannot read bag: {str(error).rstrip('.')}{hint}") from None
    try:
        yield reader
    finally:
        reader.close()


def _not_a_bag(folder: Path) -> str:
    """Say why a folder without metadata.yaml is no readable bag, and what to do."""
    storage = sorted(p.name for p in folder.iterdir() if p.suffix in ('.mcap', '.db3'))
    if storage:
        return (f'no metadata.yaml beside {storage[:3]}: a recording stopped before it '
                f'finished? `rdl bag recover {folder} --out FIXED` writes its intact messages '
                f'into a new bag (or `ros2 bag reindex {folder}`)')
    inner = sorted(p.parent.name for p in folder.glob('*/metadata.yaml'))
    return ('not a rosbag2 folder (no metadata.yaml)'
            + (f'; the bags in it are {inner[:5]}: give one of them' if inner else ''))


def storage_of(path: PathLike) -> str:
    """Return 'mcap' or 'sqlite3' from the bag's storage files."""
    path = Path(path)
    if any(path.glob('*.mcap')):
        return 'mcap'
    if any(path.glob('*.db3')):
        return 'sqlite3'
    raise ValueError(f'{path}: no .mcap or .db3 storage file')


@dataclass(frozen=True)
class TopicSummary:
    """One topic of a bag: type, message count and receive-time span."""

    topic: str
    msgtype: str
    count: int
    first_ns: int
    last_ns: int

    @property
    def duration_s(self) -> float:
        """Return seconds between the first and last message."""
        return (self.last_ns - self.first_ns) * 1e-9

    @property
    def rate_hz(self) -> float:
        """Return the mean message rate (0 with fewer than two messages)."""
        if self.count < 2 or self.last_ns <= self.first_ns:
            return 0.0
        return (self.count - 1) / self.duration_s


@dataclass(frozen=True)
class BagInfo:
    """Summary of a bag: storage, span and per-topic statistics (receive times)."""

    path: str
    storage: str
    start_ns: int
    end_ns: int
    message_count: int
    topics: List[TopicSummary]

    @property
    def duration_s(self) -> float:
        """Return seconds between the first and last message of any topic."""
        return max(0, self.end_ns - self.start_ns) * 1e-9


def bag_info(path: PathLike, typestore: str = 'jazzy') -> BagInfo:
    """Summarise a bag (reads receive times only, deserialises nothing)."""
    with open_bag(path, typestore) as reader:
        first: Dict[str, int] = {}
        last: Dict[str, int] = {}
        counts: Dict[str, int] = {}
        types: Dict[str, str] = {}
        for connection in reader.connections:
            types[connection.topic] = connection.msgtype
            counts.setdefault(connection.topic, 0)
        for connection, stamp, _ in reader.messages():
            topic = connection.topic
            first.setdefault(topic, stamp)
            last[topic] = stamp
            counts[topic] += 1
        topics = [TopicSummary(t, types[t], counts[t], first.get(t, 0), last.get(t, 0))
                  for t in sorted(types)]
        start = min(first.values(), default=0)
        end = max(last.values(), default=0)
        return BagInfo(str(path), storage_of(path), start, end, sum(counts.values()), topics)


@dataclass
class TopicArrays:
    """
    One topic of a bag as arrays, in receive order.

    stamp_ns: (T,) int64 header stamps, or receive times for types without a header
        (stamp_source says which); receive_ns: (T,) int64 bag log times.
    fields: per type (float64, SI as in the message): JointState 'position', 'velocity',
        'effort' (T, n) in joint_names order (absent when not in the messages); PoseStamped
        'position' (T, 3) m, 'quaternion' (T, 4) [x, y, z, w], 'yaw' (T,) rad; Twist,
        TwistStamped, Joy 'throttle', 'steering' (T,); Float64MultiArray 'data' (T, m).
    rejections: RejectionCounter.as_dict() of the read ('accepted' plus reason counts).
    """

    topic: str
    msgtype: str
    stamp_ns: np.ndarray
    receive_ns: np.ndarray
    stamp_source: str
    fields: Dict[str, np.ndarray]
    joint_names: List[str] = field(default_factory=list)
    frame_id: str = ''
    rejections: Dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        """Return the number of accepted messages."""
        return int(self.stamp_ns.size)

    @property
    def time(self) -> np.ndarray:
        """Return stamps as seconds since the first one, (T,) float64."""
        return (self.stamp_ns - self.stamp_ns[0]) * 1e-9 if len(self) else np.zeros(0)


class _Collector:
    """
    Accumulates parsed messages into preallocated arrays that grow when full.

    capacity is the bag's metadata count, only a hint: metadata.yaml is outside data, so a
    count too small grows the arrays (doubling) and one too large allocates at most
    MAX_INITIAL_ROWS rows up front.
    """

    MAX_INITIAL_ROWS = 1 << 16

    def __init__(self, parser, capacity: int, receive_time: bool = False) -> None:
        self.parser = parser
        self.receive_time = receive_time   # the header stamps are unset: receive times
        self.capacity = max(16, min(int(capacity), self.MAX_INITIAL_ROWS))
        self.n = 0
        self.stamp_ns = np.zeros(self.capacity, dtype=np.int64)
        self.receive_ns = np.zeros(self.capacity, dtype=np.int64)
        self.arrays: Dict[str, np.ndarray] = {}
        self.frame_id = ''

    def _row(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        array = self.arrays.get(name)
        if array is None:
            array = self.arrays[name] = np.full((self.capacity,) + shape, np.nan)
        return array

    def _grow(self) -> None:
        """Double every array (amortised O(1) per message)."""
        self.capacity *= 2

        def grown(array: np.ndarray, fill) -> np.ndarray:
            out = np.full((self.capacity,) + array.shape[1:], fill, dtype=array.dtype)
            out[:array.shape[0]] = array
            return out
        self.stamp_ns = grown(self.stamp_ns, 0)
        self.receive_ns = grown(self.receive_ns, 0)
        self.arrays = {name: grown(array, np.nan) for name, array in self.arrays.items()}

    def add(self, msg: object, receive_ns: int) -> None:
        result = self.parser.parse(msg)
        if result.ok:
            if self.n == self.capacity:
                self._grow()
            self.receive_ns[self.n] = receive_ns
            self.store(result.value, receive_ns)
            self.n += 1

    def store(self, value: object, receive_ns: int) -> None:
        raise NotImplementedError

    def _stamp(self, stamp_ns: Optional[int], receive_ns: int) -> int:
        """Return the row's time: the header stamp, else (unset or none) the receive time."""
        return receive_ns if self.receive_time or stamp_ns is None else stamp_ns

    def finish(self, source: str, header_stamps: bool) -> Dict[str, np.ndarray]:
        """Return the fields, once the checks that need the whole topic dropped their rows."""
        if header_stamps:
            self._order_stamps(source)
        return {name: array[:self.n] for name, array in self.arrays.items()}

    def _order_stamps(self, source: str) -> None:
        """Drop the messages whose header stamps break the order (`ordered_rows`), logged."""
        keep = ordered_rows(self.stamp_ns[:self.n])
        if keep.all():
            return
        repeated = _repeated(self.stamp_ns[:self.n] * 1e-9, keep)
        resets = len(time_resets(self.stamp_ns[:self.n]))
        note = (f'; {resets} time reset(s): the messages after one count only past the stamp '
                'before it' if resets else '')
        counter = self.parser.counter
        for reason, dropped in ((Reason.STAMP_REPEATED, repeated),
                                (Reason.STAMP_BACKWARDS, ~keep & ~repeated)):
            if dropped.any():
                counter.reject_accepted(reason, int(dropped.sum()), 'out of order among the '
                                        f'stamps of the whole topic{note}')
        LOG.warning('%s: %d messages dropped so that header stamps increase (the fewest: a '
                    'lone stamp far ahead costs only itself)%s', source, int((~keep).sum()),
                    note)
        self._keep_rows(keep)

    def _keep_rows(self, keep: np.ndarray) -> None:
        """Keep the rows where keep (n,) is True, dropping the others from every array."""
        self.stamp_ns = self.stamp_ns[:self.n][keep]
        self.receive_ns = self.receive_ns[:self.n][keep]
        self.arrays = {name: array[:self.n][keep] for name, array in self.arrays.items()}
        self.n = self.capacity = int(keep.sum())


class _JointCollector(_Collector):
    def __init__(self, parser: JointStateParser, capacity: int,
                 receive_time: bool = False) -> None:
        super().__init__(parser, capacity, receive_time)
        self.present = dict.fromkeys(JointStateParser.FIELDS, 0)
        self.other_sets = JointSetTally()   # the rejected messages of other joint sets

    def add(self, msg: object, receive_ns: int) -> None:
        """Add a message; count it under its joint set when that set is not the one read."""
        accepted = self.n
        super().add(msg, receive_ns)
        if self.n > accepted or self.parser.joint_names is None:
            return
        try:
            names = [str(n) for n in msg.name]
        except (AttributeError, TypeError):
            return
        if names and set(names) != set(self.parser.joint_names):
            self.other_sets.add(names)

    def store(self, sample, receive_ns: int) -> None:
        self.stamp_ns[self.n] = self._stamp(sample.stamp_ns, receive_ns)
        n_joints = len(self.parser.joint_names)
        for name in JointStateParser.FIELDS:
            values = getattr(sample, name)
            if values is not None:
                self._row(name, (n_joints,))[self.n] = values
                self.present[name] += 1

    def finish(self, source: str, header_stamps: bool) -> Dict[str, np.ndarray]:
        """
        Return the arrays, first dropping the messages without an optional array others carry.

        Those are counted as missing_field, as a required array would be: a few messages
        without effort (a driver hiccup) must not make a whole bag unreadable, and rows with
        and without a field cannot form one array.
        """
        partial = [name for name, k in self.present.items() if 0 < k < self.n]
        if partial:
            keep = np.all([~np.isnan(self.arrays[name][:self.n]).any(axis=1)
                           for name in partial], axis=0)
            self.parser.counter.reject_accepted(
                Reason.MISSING_FIELD, int((~keep).sum()),
                f'{partial} empty while other messages carry them')
            self._keep_rows(keep)
        return super().finish(source, header_stamps)


class _PoseCollector(_Collector):
    def store(self, sample, receive_ns: int) -> None:
        self.stamp_ns[self.n] = self._stamp(sample.stamp_ns, receive_ns)
        self._row('position', (3,))[self.n] = sample.position
        self._row('quaternion', (4,))[self.n] = sample.quaternion
        self._row('yaw', ())[self.n] = sample.yaw
        self.frame_id = sample.frame_id


class _CommandCollector(_Collector):
    """Commands; with a safety button (Joy) also 'safety': 1 while it is held, else 0."""

    def __init__(self, parser, capacity: int, safety_button: Optional[int] = None,
                 receive_time: bool = False) -> None:
        super().__init__(parser, capacity, receive_time)
        self.safety_button = safety_button
        self._buttons: Sequence[int] = ()

    def add(self, msg: object, receive_ns: int) -> None:
        self._buttons = getattr(msg, 'buttons', ())
        super().add(msg, receive_ns)

    def store(self, command, receive_ns: int) -> None:
        self.stamp_ns[self.n] = self._stamp(command.stamp_ns, receive_ns)
        self._row('throttle', ())[self.n] = command.throttle
        self._row('steering', ())[self.n] = command.steering
        if self.safety_button is not None:
            button = self.safety_button
            held = len(self._buttons) > button and self._buttons[button] != 0
            self._row('safety', ())[self.n] = float(held)


class _ArrayCollector(_Collector):
    def store(self, data: np.ndarray, receive_ns: int) -> None:
        # The first accepted message fixes the length; later ones must match (WRONG_SIZE).
        self.parser.size = data.size
        self.stamp_ns[self.n] = receive_ns
        self._row('data', (data.size,))[self.n] = data


def read_topic(path: PathLike, topic: str, *, joint_names: Optional[Sequence[str]] = None,
               position: FieldNeed = FieldNeed.REQUIRED,
               velocity: FieldNeed = FieldNeed.OPTIONAL,
               effort: FieldNeed = FieldNeed.OPTIONAL,
               mapping: CommandMapping = CommandMapping(), size: Optional[int] = None,
               safety_button: Optional[int] = None, typestore: str = 'jazzy',
               progress: bool = False, receive_time: bool = False) -> TopicArrays:
    """
    Read one topic of a supported type into `TopicArrays`, skipping invalid messages.

    receive_time (types with a header): stamp the messages with their receive times. Taken
    by itself when every header stamp of the topic is 0: a publisher that leaves the header
    unset (a teleop node, a hand-written joint state publisher) would otherwise lose every
    message of a recording (zero_stamp).

    Header stamps are ordered over the whole topic (`ordered_rows`): the fewest messages are
    dropped so that they increase, counted as stamp_backwards or stamp_repeated and logged.

    joint_names (JointState): output order; None takes the first message's names. position,
    velocity, effort: `FieldNeed` per array; messages without an optional array that other
    messages carry are skipped (counted as missing_field). mapping: Twist/Joy ->
    throttle, steering. size: required Float64MultiArray length (None: the first message's).
    safety_button (Joy only): index of the deadman button, read into the field 'safety'.
    """
    with open_bag(path, typestore) as reader:
        connections = [c for c in reader.connections if c.topic == topic]
        if not connections:
            topics = sorted({c.topic for c in reader.connections})
            raise ValueError(f"topic '{topic}' is not in {path}; it has {topics}")
        msgtype = connections[0].msgtype
        if any(c.msgtype != msgtype for c in connections):
            raise ValueError(f"topic '{topic}' has several message types")
        if msgtype not in SUPPORTED_TYPES:
            raise ValueError(f"topic '{topic}' has unsupported type {msgtype}; supported: "
                             f'{list(SUPPORTED_TYPES)}')
        # metadata.yaml counts: a hint only (any value, even not a number, is possible).
        counts = [c.msgcount for c in connections]
        capacity = sum(counts) if all(type(k) is int and k >= 0 for k in counts) else 0
        if safety_button is not None and msgtype != JOY:
            raise ValueError(f"a safety button needs Joy commands; '{topic}' is {msgtype}")
        collector = _make_collector(msgtype, capacity, joint_names, position, velocity, effort,
                                    mapping, size, safety_button, receive_time)
        deserialize = reader.typestore.deserialize_cdr
        messages = reader.messages(connections=connections)
        for _, receive_ns, raw in tqdm(messages, total=capacity, disable=not progress,
                                       unit='msg', desc=topic, leave=False):
            try:
                msg = deserialize(raw, msgtype)
            except Exception as error:  # noqa: B902 - one corrupt message is a rejection
                collector.parser.counter.count(
                    Result(reason=Reason.MALFORMED, detail=f'cannot deserialize: {error}'))
                continue
            collector.add(msg, receive_ns)
    chosen = _chosen_joint_set(collector) if joint_names is None else None
    if chosen is not None:
        LOG.warning('%s:%s carries several joint sets; reading %s (%d messages), the one with '
                    "the most joints, not the first message's %s (%d): name the joints to "
                    'choose', path, topic, chosen, collector.other_sets.counts()[tuple(chosen)],
                    collector.parser.joint_names, collector.n)
        return read_topic(path, topic, joint_names=chosen, position=position,
                          velocity=velocity, effort=effort, typestore=typestore,
                          progress=progress)
    rejections = collector.parser.counter.as_dict()
    zero_stamps = rejections.get(Reason.ZERO_STAMP.value, 0)
    if not receive_time and collector.n == 0 and 0 < zero_stamps == sum(rejections.values()):
        LOG.warning('%s:%s: every header stamp is 0 (the publisher leaves it unset): the '
                    'messages are stamped with their receive times', path, topic)
        return read_topic(path, topic, joint_names=joint_names, position=position,
                          velocity=velocity, effort=effort, mapping=mapping, size=size,
                          safety_button=safety_button, typestore=typestore, progress=progress,
                          receive_time=True)
    unstamped = msgtype in (TWIST, FLOAT64_MULTI_ARRAY) or receive_time
    stamp_source = 'receive' if unstamped else 'header'
    fields = collector.finish(f'{path}:{topic}', stamp_source == 'header')   # may drop rows
    n = collector.n
    return TopicArrays(
        topic=topic, msgtype=msgtype, stamp_ns=collector.stamp_ns[:n].copy(),
        receive_ns=collector.receive_ns[:n].copy(), stamp_source=stamp_source,
        fields={k: v.copy() for k, v in fields.items()},
        joint_names=list(getattr(collector.parser, 'joint_names', None) or []),
        frame_id=collector.frame_id, rejections=collector.parser.counter.as_dict())


def _chosen_joint_set(collector: _Collector) -> Optional[List[str]]:
    """
    Return the joint set `choose_joint_set` picks when it is not the first message's, if any.

    Two publishers on one topic (an arm's broadcaster and a gripper's) are common: the first
    message must not decide, or a 1-joint gripper hides the arm (the nodes choose alike).
    """
    if not isinstance(collector, _JointCollector) or not collector.other_sets:
        return None
    adopted = tuple(collector.parser.joint_names or ())
    chosen = choose_joint_set({adopted: collector.n, **collector.other_sets.counts()})
    return None if chosen == adopted else list(chosen)


def _make_collector(msgtype: str, capacity: int, joint_names, position, velocity, effort,
                    mapping: CommandMapping, size: Optional[int],
                    safety_button: Optional[int] = None,
                    receive_time: bool = False) -> _Collector:
    stamps = not receive_time   # unset header stamps (all 0) are not checked
    if msgtype == JOINT_STATE:
        parser = JointStateParser(joint_names, position, velocity, effort, check_stamps=stamps,
                                  bounds=UNORDERED)
        return _JointCollector(parser, capacity, receive_time)
    if msgtype in POSE_TYPES:
        return _PoseCollector(PoseParser(check_stamps=stamps, bounds=UNORDERED), capacity,
                              receive_time)
    if msgtype == FLOAT64_MULTI_ARRAY:
        return _ArrayCollector(ArrayParser(size), capacity)
    return _CommandCollector(CarCommandParser(mapping, check_stamps=stamps, bounds=UNORDERED),
                             capacity, safety_button, receive_time)


def ordered_rows(stamp_ns: np.ndarray) -> np.ndarray:
    """
    Return a mask of the rows to keep so that stamps (as float seconds) strictly increase.

    A running check keeps a lone stamp far ahead and drops every later one as backwards: here
    the fewest rows are dropped (`datasets.increasing_rows`). Not across a time reset (a
    looping bag, a restarted simulation: `time_resets`), where the fewest would splice two
    runs: the rows after one count only past the last stamp kept before it, as in a running
    check.
    """
    seconds = np.asarray(stamp_ns) * 1e-9
    if np.all(np.diff(seconds) > 0):
        return np.ones(seconds.size, dtype=bool)
    keep = np.zeros(seconds.size, dtype=bool)
    bounds = [0] + time_resets(stamp_ns) + [seconds.size]
    last = -np.inf
    for start, stop in zip(bounds[:-1], bounds[1:]):
        rows = start + np.flatnonzero(seconds[start:stop] > last)
        kept = rows[datasets.increasing_rows(seconds[rows])]
        keep[kept] = True
        if kept.size:
            last = seconds[kept[-1]]
    return keep


def time_resets(stamp_ns: np.ndarray) -> List[int]:
    """
    Return the rows where time starts again (a looping bag, a restarted simulation).

    Such a row lies TIME_RESET_NS or more behind the median of the RELOCK_AFTER rows before
    it, all since the previous reset: a few stamps far ahead do not move that median, so the
    return from them is no reset, nor is the return from the first rows stamped far ahead.
    """
    stamp_ns = np.asarray(stamp_ns, dtype=np.int64)
    resets: List[int] = []
    for row in (np.flatnonzero(np.diff(stamp_ns) <= -TIME_RESET_NS) + 1).tolist():
        if row - (resets[-1] if resets else 0) < RELOCK_AFTER:
            continue
        if stamp_ns[row] <= np.median(stamp_ns[row - RELOCK_AFTER:row]) - TIME_RESET_NS:
            resets.append(row)
    return resets


def _repeated(seconds: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Return the dropped rows stamped as the last kept row before them (stamp_repeated)."""
    last_kept = np.maximum.accumulate(np.where(keep, np.arange(keep.size), 0))
    return ~keep & (seconds == seconds[last_kept]) & keep[last_kept]


def hold_last(source_ns: np.ndarray, values: np.ndarray, target_ns: np.ndarray
              ) -> Tuple[np.ndarray, np.ndarray]:
    """
    Zero-order hold: the latest source value at or before each target time.

    Returns (values at targets (len(target_ns), ...), valid (len(target_ns),) bool: False
    where no source value precedes the target). source_ns must be non-decreasing.
    """
    index = np.searchsorted(source_ns, target_ns, side='right') - 1
    valid = index >= 0
    return values[np.maximum(index, 0)], valid


def joint_states_to_trajectory(joints: TopicArrays, commands: Optional[TopicArrays] = None,
                               source: str = '') -> Trajectory:
    """
    Turn JointState arrays (plus an optional Float64MultiArray command topic) into a Trajectory.

    time is header stamps since the first one; q, qd, tau are position, velocity, effort.
    Commands become `actions`, held (zero-order) on receive time, the time base shared by
    all topics; joint samples received before the first command are dropped.
    """
    if joints.msgtype != JOINT_STATE:
        raise ValueError(f'{joints.topic} is {joints.msgtype}, not {JOINT_STATE}')
    if len(joints) == 0:
        expected = f'; joints expected: {joints.joint_names}' if joints.joint_names else ''
        raise ValueError(f'{joints.topic}: no valid JointState messages ({joints.rejections})'
                         f'{expected}')
    keep = slice(None)
    actions = None
    if commands is not None:
        actions, valid = hold_last(commands.receive_ns, commands.fields['data'],
                                   joints.receive_ns)
        if not valid.any():
            raise ValueError(f'no {commands.topic} message precedes any joint state')
        keep = slice(int(np.argmax(valid)), None)
        actions = actions[keep]
    stamps = joints.stamp_ns[keep]
    return Trajectory(
        time=(stamps - stamps[0]) * 1e-9, joint_names=list(joints.joint_names),
        q=_get(joints, 'position', keep), qd=_get(joints, 'velocity', keep),
        tau=_get(joints, 'effort', keep), actions=actions,
        units={'q': 'rad', 'qd': 'rad/s', 'tau': 'N m'},
        source=source or f'{joints.topic}')


def _get(arrays: TopicArrays, name: str, keep: slice) -> Optional[np.ndarray]:
    value = arrays.fields.get(name)
    return None if value is None else value[keep]


def read_trajectory(path: PathLike, joint_topic: str = JOINT_TOPIC,
                    command_topic: Optional[str] = None,
                    joint_names: Optional[Sequence[str]] = None, typestore: str = 'jazzy',
                    progress: bool = False) -> Trajectory:
    """Read a JointState topic (plus an optional command topic) as a `Trajectory`."""
    joints = read_topic(path, joint_topic, joint_names=joint_names, typestore=typestore,
                        progress=progress)
    commands = None if command_topic is None else read_topic(
        path, command_topic, typestore=typestore, progress=progress)
    for arrays in (joints, commands):
        if arrays is not None:
            log_skipped(path, arrays)
    return joint_states_to_trajectory(joints, commands, source=f'{path}:{joint_topic}')


def log_skipped(path: PathLike, arrays: 'TopicArrays') -> None:
    """Log the messages a read skipped, with their reasons: they must not pass unnoticed."""
    skipped = {k: n for k, n in arrays.rejections.items() if k != 'accepted' and n}
    if skipped:
        LOG.warning('%s:%s: skipped messages: %s', path, arrays.topic,
                    ', '.join(f'{n} {k}' for k, n in skipped.items()))


def no_throttle(source: PathLike, why: str, hint: str) -> str:
    """
    Return the refusal of a drive whose every throttle would count as 0, saying why.

    Such a drive (a deadman never held, bags and CSVs alike) would be learned as coasting.
    """
    return f'{source}: {why}: every throttle would count as 0; {hint}'


def read_car_trajectory(path: PathLike, pose_topic: str = CAR_POSE_TOPIC,
                        command_topic: str = CAR_COMMAND_TOPIC,
                        mapping: CommandMapping = CommandMapping(),
                        safety_button: Optional[int] = None, typestore: str = 'jazzy',
                        progress: bool = False) -> Trajectory:
    """
    Mocap poses plus car commands -> `Trajectory` (observations [x, y, yaw], actions).

    yaw is unwrapped; actions [throttle, steering] are held (zero-order) on receive time;
    poses received before the first command are dropped. safety_button (Joy commands): the
    deadman button's index; throttle counts as 0 while it is released (as DART's
    safety_value), so coasting with the button up is not learned as driving. A user's
    mistakes are one-line errors: a topic of the wrong type, no valid message (a Joy with
    too few axes), a deadman button that is never held (every throttle would be 0); rejected
    messages (NaN, bad quaternions, backwards stamps) are logged with their counts.
    """
    poses = read_topic(path, pose_topic, typestore=typestore, progress=progress)
    if poses.msgtype not in POSE_TYPES:
        raise ValueError(f"{path}: pose topic '{pose_topic}' is {poses.msgtype}, not one of "
                         f'{list(POSE_TYPES)}')
    commands = read_topic(path, command_topic, mapping=mapping, safety_button=safety_button,
                          typestore=typestore, progress=progress)
    if commands.msgtype not in CAR_COMMAND_TYPES:
        raise ValueError(f"{path}: command topic '{command_topic}' is {commands.msgtype}, not "
                         f'one of {list(CAR_COMMAND_TYPES)}')
    for arrays, what in ((poses, 'pose'), (commands, 'command')):
        log_skipped(path, arrays)
        if len(arrays) == 0:
            hint = ('; check the Joy throttle and steering axes'
                    if arrays.rejections.get('missing_axis') else '')
            raise ValueError(f"{path}: no valid {what} on '{arrays.topic}' (read: "
                             f'{arrays.rejections}){hint}')
    tilted = tilt_problem(poses.fields['quaternion'])
    if tilted is not None:
        raise ValueError(f"{path}: '{pose_topic}': {tilted}")
    throttle = commands.fields['throttle']
    if safety_button is not None:
        held = commands.fields['safety'] > 0
        if not held.any():
            raise ValueError(no_throttle(path, f'safety button {safety_button} is never held in '
                                               f'the {len(commands)} Joy messages on '
                                               f"'{command_topic}'", 'check the button index'))
        throttle = np.where(held, throttle, 0.0)
    command_values = np.stack([throttle, commands.fields['steering']], 1)
    actions, valid = hold_last(commands.receive_ns, command_values, poses.receive_ns)
    if not valid.any():
        raise ValueError(f"{path}: no '{command_topic}' message precedes any pose")
    start = int(np.argmax(valid))
    stamps = poses.stamp_ns[start:]
    position = poses.fields['position'][start:]
    observations = np.stack([position[:, 0], position[:, 1],
                             np.unwrap(poses.fields['yaw'][start:])], axis=1)
    return Trajectory(time=(stamps - stamps[0]) * 1e-9, observations=observations,
                      actions=actions[start:],
                      units={'observations': 'm, m, rad', 'actions': 'throttle, steering'},
                      source=f'{path}:{pose_topic}+{command_topic}')


def close_or_discard(writer: Writer, path: Path, failed: bool) -> None:
    """
    Close a bag this process created; if writing it failed, remove it.

    Why: a bag cut short by an error or Ctrl-C still reads as a whole recording, which a
    later `rdl train` would take for all the data.
    """
    try:
        writer.close()
    finally:
        if failed:
            shutil.rmtree(path, ignore_errors=True)


class BagWriter:
    """
    A new rosbag2 (version 8, readable by Humble and later) in sqlite3 or MCAP storage.

    Messages are built from the typestore's own classes and serialised to CDR; topics get
    their connection on first use. Use as a context manager.
    """

    def __init__(self, path: PathLike, storage: str = 'mcap', typestore: str = 'jazzy'
                 ) -> None:
        if storage not in STORAGES:
            raise ValueError(f"unknown storage '{storage}', choose from {sorted(STORAGES)}")
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f'{self.path} exists already; bags are never overwritten')
        self.typestore = named_typestore(typestore)
        self._writer = Writer(self.path, version=8, storage_plugin=STORAGES[storage])
        self._connections: Dict[Tuple[str, str], object] = {}
        self._types = self.typestore.types
        self.count = 0

    def __enter__(self) -> 'BagWriter':
        """Create the bag folder; an existing path is an error, never overwritten."""
        try:
            self._writer.open()
        except WriterError as error:
            raise FileExistsError(f'{self.path}: {error}') from None
        return self

    def __exit__(self, exc_type, *exc) -> None:
        """Finish the bag (metadata.yaml), or remove it if writing failed."""
        close_or_discard(self._writer, self.path, failed=exc_type is not None)

    def write_raw(self, topic: str, msgtype: str, log_ns: int, raw: bytes) -> None:
        """Write already serialised CDR bytes at log (receive) time log_ns."""
        key = (topic, msgtype)
        connection = self._connections.get(key)
        if connection is None:
            connection = self._connections[key] = self._writer.add_connection(
                topic, msgtype, typestore=self.typestore)
        self._writer.write(connection, int(log_ns), raw)
        self.count += 1

    def write(self, topic: str, msgtype: str, log_ns: int, msg: object) -> None:
        """Serialise a message of the typestore's classes and write it."""
        self.write_raw(topic, msgtype, log_ns, self.typestore.serialize_cdr(msg, msgtype))

    def header(self, stamp_ns: int, frame_id: str = '') -> object:
        """Return a std_msgs/Header of this typestore (stamp seconds must fit int32)."""
        sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
        if not -2**31 <= sec < 2**31:
            raise ValueError(f'stamp {stamp_ns} ns does not fit builtin_interfaces/Time')
        time = self._types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec)
        return self._types['std_msgs/msg/Header'](stamp=time, frame_id=frame_id)

    def joint_state(self, stamp_ns: int, names: Sequence[str],
                    position: Optional[np.ndarray] = None,
                    velocity: Optional[np.ndarray] = None,
                    effort: Optional[np.ndarray] = None, frame_id: str = '') -> object:
        """Return a JointState; arrays (n,) in names order, None for an empty field."""
        def doubles(values: Optional[np.ndarray]) -> np.ndarray:
            # contiguous: a row of a column-major or column-indexed array fails to serialise
            return (np.zeros(0) if values is None else
                    np.ascontiguousarray(values, dtype=np.float64))
        return self._types[JOINT_STATE](
            header=self.header(stamp_ns, frame_id), name=list(names),
            position=doubles(position), velocity=doubles(velocity), effort=doubles(effort))

    def pose_stamped(self, stamp_ns: int, position: Sequence[float],
                     quaternion: Sequence[float], frame_id: str = 'world') -> object:
        """Return a PoseStamped from position (3,) m and quaternion (4,) [x, y, z, w]."""
        types = self._types
        point = types['geometry_msgs/msg/Point'](*(float(v) for v in position))
        orientation = types['geometry_msgs/msg/Quaternion'](*(float(v) for v in quaternion))
        pose = types['geometry_msgs/msg/Pose'](position=point, orientation=orientation)
        return types[POSE_STAMPED](header=self.header(stamp_ns, frame_id), pose=pose)

    def twist(self, throttle: float, steering: float,
              mapping: CommandMapping = CommandMapping()) -> object:
        """Return a Twist: linear.x = throttle / throttle_scale, angular.z likewise."""
        vector = self._types['geometry_msgs/msg/Vector3']
        return self._types[TWIST](
            linear=vector(float(throttle) / mapping.throttle_scale, 0.0, 0.0),
            angular=vector(0.0, 0.0, float(steering) / mapping.steering_scale))

    def twist_stamped(self, stamp_ns: int, throttle: float, steering: float,
                      mapping: CommandMapping = CommandMapping(),
                      frame_id: str = 'base_link') -> object:
        """Return a TwistStamped with the `twist` mapping."""
        return self._types[TWIST_STAMPED](header=self.header(stamp_ns, frame_id),
                                          twist=self.twist(throttle, steering, mapping))

    def joy(self, stamp_ns: int, throttle: float, steering: float,
            mapping: CommandMapping = CommandMapping(),
            buttons: Sequence[int] = ()) -> object:
        """Return a Joy with the mapped axes set, every other axis 0, and `buttons`."""
        axes = np.zeros(max(mapping.throttle_axis, mapping.steering_axis) + 1, np.float32)
        axes[mapping.throttle_axis] = throttle / mapping.throttle_scale
        axes[mapping.steering_axis] = steering / mapping.steering_scale
        return self._types[JOY](header=self.header(stamp_ns), axes=axes,
                                buttons=np.asarray(buttons, np.int32))

    def float64_array(self, values: np.ndarray) -> object:
        """Return a Float64MultiArray with an empty layout."""
        layout = self._types['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0)
        return self._types[FLOAT64_MULTI_ARRAY](
            layout=layout, data=np.asarray(values, dtype=np.float64).ravel())


def _stamps(trajectories: Sequence[Trajectory], epoch_ns: int, gap_s: float
            ) -> List[np.ndarray]:
    """Integer-ns stamps per trajectory: back to back from epoch_ns, gap_s apart."""
    out = []
    offset = int(epoch_ns)
    for trajectory in trajectories:
        relative = np.round((trajectory.time - trajectory.time[0]) * 1e9).astype(np.int64)
        out.append(offset + relative)
        offset = int(out[-1][-1]) + int(round(gap_s * 1e9))
    return out


def write_joint_trajectories(path: PathLike, trajectories: Sequence[Trajectory],
                             storage: str = 'mcap', joint_topic: str = JOINT_TOPIC,
                             command_topic: Optional[str] = None, effort: bool = True,
                             epoch_ns: int = EPOCH_NS, gap_s: float = 1.0,
                             typestore: str = 'jazzy', progress: bool = False) -> int:
    """
    Write trajectories as JointState (position q, velocity qd, effort tau when effort).

    command_topic: also write `actions` as Float64MultiArray at the same times. Trajectories
    follow each other gap_s apart from epoch_ns; header stamp = log time. Returns the count.
    """
    stamps = _stamps(trajectories, epoch_ns, gap_s)
    total = sum(len(t) for t in trajectories)
    with BagWriter(path, storage, typestore) as bag, tqdm(
            total=total, disable=not progress, unit='sample', desc='write') as bar:
        for trajectory, stamp_ns in zip(trajectories, stamps):
            if trajectory.q is None:
                raise ValueError(f'{trajectory.source}: no joint positions to write')
            if command_topic is not None and trajectory.actions is None:
                raise ValueError(f'{trajectory.source}: no actions for {command_topic}')
            tau = trajectory.tau if effort else None
            for i, t_ns in enumerate(stamp_ns.tolist()):
                bag.write(joint_topic, JOINT_STATE, t_ns, bag.joint_state(
                    t_ns, trajectory.joint_names, trajectory.q[i],
                    None if trajectory.qd is None else trajectory.qd[i],
                    None if tau is None else tau[i]))
                if command_topic is not None:
                    bag.write(command_topic, FLOAT64_MULTI_ARRAY, t_ns,
                              bag.float64_array(trajectory.actions[i]))
            bar.update(len(trajectory))
        return bag.count


def write_car_trajectories(path: PathLike, trajectories: Sequence[Trajectory],
                           storage: str = 'mcap', pose_topic: str = CAR_POSE_TOPIC,
                           command_topic: str = CAR_COMMAND_TOPIC,
                           command_type: str = TWIST_STAMPED,
                           mapping: CommandMapping = CommandMapping(), frame_id: str = 'world',
                           epoch_ns: int = EPOCH_NS, gap_s: float = 1.0,
                           typestore: str = 'jazzy', progress: bool = False) -> int:
    """
    Write car trajectories (observations [x, y, yaw], actions [throttle, steering]).

    Poses as PoseStamped (z = 0, quaternion from yaw) on pose_topic; commands as
    command_type (TwistStamped, Twist or Joy, per `mapping`) on command_topic at the same
    times. Returns the number of messages.
    """
    if command_type not in (TWIST, TWIST_STAMPED, JOY):
        raise ValueError(f'command_type must be Twist, TwistStamped or Joy, got {command_type}')
    stamps = _stamps(trajectories, epoch_ns, gap_s)
    with BagWriter(path, storage, typestore) as bag:
        for trajectory, stamp_ns in zip(trajectories, stamps):
            if trajectory.observations is None or trajectory.actions is None:
                raise ValueError(f'{trajectory.source}: needs observations and actions')
            quaternions = quaternion_from_yaw(trajectory.observations[:, 2])
            for i, t_ns in enumerate(tqdm(stamp_ns.tolist(), disable=not progress,
                                          unit='sample', desc='write', leave=False)):
                x, y = trajectory.observations[i, :2]
                bag.write(pose_topic, POSE_STAMPED, t_ns,
                          bag.pose_stamped(t_ns, (x, y, 0.0), quaternions[i], frame_id))
                throttle, steering = trajectory.actions[i]
                if command_type == TWIST_STAMPED:
                    msg = bag.twist_stamped(t_ns, throttle, steering, mapping)
                elif command_type == TWIST:
                    msg = bag.twist(throttle, steering, mapping)
                else:
                    msg = bag.joy(t_ns, throttle, steering, mapping)
                bag.write(command_topic, command_type, t_ns, msg)
        return bag.count


def write_topic_arrays(path: PathLike, topics: Sequence[TopicArrays], storage: str = 'mcap',
                       typestore: str = 'jazzy',
                       mapping: CommandMapping = CommandMapping()) -> int:
    """
    Write `TopicArrays` back as messages, merged by receive time (the inverse of read_topic).

    Arrays read from a bag re-write to identical message bytes, except fields that reading
    drops (frame ids of JointState and TwistStamped, Joy buttons and unmapped axes).
    """
    def rows(index: int, arrays: TopicArrays):
        for i in range(len(arrays)):
            yield int(arrays.receive_ns[i]), index, i

    with BagWriter(path, storage, typestore) as bag:
        for receive_ns, index, i in heapq.merge(*(rows(k, a) for k, a in enumerate(topics))):
            arrays = topics[index]
            f = {name: value[i] for name, value in arrays.fields.items()}
            stamp_ns = int(arrays.stamp_ns[i])
            if arrays.msgtype == JOINT_STATE:
                msg = bag.joint_state(stamp_ns, arrays.joint_names, f.get('position'),
                                      f.get('velocity'), f.get('effort'), arrays.frame_id)
            elif arrays.msgtype in POSE_TYPES:   # written as PoseStamped
                msg = bag.pose_stamped(stamp_ns, f['position'], f['quaternion'],
                                       arrays.frame_id)
            elif arrays.msgtype == FLOAT64_MULTI_ARRAY:
                msg = bag.float64_array(f['data'])
            elif arrays.msgtype == TWIST:
                msg = bag.twist(f['throttle'], f['steering'], mapping)
            elif arrays.msgtype == TWIST_STAMPED:
                msg = bag.twist_stamped(stamp_ns, f['throttle'], f['steering'], mapping)
            else:
                msg = bag.joy(stamp_ns, f['throttle'], f['steering'], mapping)
            msgtype = POSE_STAMPED if arrays.msgtype in POSE_TYPES else arrays.msgtype
            bag.write(arrays.topic, msgtype, receive_ns, msg)
        return bag.count


def _select(items: Sequence, item: Optional[str], what: str) -> List:
    """Pick items by 'all', an index 'k' or a slice 'a:b' (as Python indexing)."""
    if item in (None, 'all'):
        return list(items)
    try:
        if ':' in item:
            start, stop = (int(v) if v else None for v in item.split(':', 1))
            chosen = list(items)[start:stop]
        else:
            chosen = [list(items)[int(item)]]
    except (ValueError, IndexError):
        raise ValueError(f"bad {what} selection '{item}': use all, an index k or a slice "
                         f'a:b (there are {len(items)})') from None
    if not chosen:
        raise ValueError(f"{what} selection '{item}' is empty")
    return chosen


def load_dataset(name: str, item: Optional[str] = None,
                 root: Optional[Path] = None) -> List[Trajectory]:
    """
    Load trajectories of a shared dataset for conversion to a bag.

    kinova: item is a CSV file name in kinova_gen3/ or 'train' (default) / 'test';
    pneumatic: episodes 'all' (default), an index or a slice 'a:b' in file-name order;
    schunk: runs 'all' (default), an index or a slice over the sorted run numbers;
    rc_car: Vicon files 'all' (default), an index or slice, or a CSV file name.
    """
    if name == 'kinova':
        if item in (None, 'train', 'test'):
            train, test = datasets.load_kinova_split(root=root)
            return test if item == 'test' else train
        folder = Path(root or datasets.shared_data_dir()) / 'kinova_gen3'
        if not (folder / item).is_file():
            names = sorted(p.name for p in folder.glob('*.csv'))
            raise ValueError(f"kinova item '{item}' is not train, test or one of {names}")
        return [datasets.load_kinova(folder / item)]
    if name == 'pneumatic':
        all_episodes = datasets.load_pneumatic(root=root)
        return _select(all_episodes, item, 'pneumatic episode')
    if name == 'schunk':
        folder = Path(root or datasets.shared_data_dir()) / 'schunk_lwa4p'
        runs = sorted(int(p.name.split('_')[1]) for p in folder.glob('measurement_*'))
        return datasets.load_schunk(root=root, runs=_select(runs, item, 'schunk run'))
    if name == 'rc_car':
        files = datasets.rc_car_files(root)
        by_name = [f for f in files if item is not None and f.name == item]
        chosen = by_name or _select(files, item, 'rc_car file')
        return [datasets.load_rc_car(path) for path in chosen]
    raise ValueError(f"unknown dataset '{name}', choose from {list(DATASETS)}")


def dataset_to_bag(name: str, out: PathLike, item: Optional[str] = None,
                   storage: str = 'mcap', command_type: str = TWIST_STAMPED,
                   typestore: str = 'jazzy', root: Optional[Path] = None,
                   progress: bool = False) -> int:
    """
    Convert a shared dataset to a bag with the topics of docs/data.md; return the count.

    kinova: /joint_states (position, velocity, effort = the 'Torque' columns).
    pneumatic: /joint_states (position) + cumulative pressure actions on
    /pressure_controller/commands. schunk: /joint_states (position, velocity) + motor
    torques on /effort_controller/commands. rc_car: PoseStamped on /vrpn_mocap/rc_car/pose
    + commands (command_type) on /cmd.
    """
    trajectories = load_dataset(name, item, root)
    if name == 'kinova':
        return write_joint_trajectories(out, trajectories, storage, typestore=typestore,
                                        progress=progress)
    if name == 'rc_car':
        return write_car_trajectories(out, trajectories, storage, command_type=command_type,
                                      typestore=typestore, progress=progress)
    command_topic = PNEUMATIC_COMMAND_TOPIC if name == 'pneumatic' else SCHUNK_COMMAND_TOPIC
    return write_joint_trajectories(out, trajectories, storage, command_topic=command_topic,
                                    effort=False, typestore=typestore, progress=progress)
