"""
Bag replay evaluation: the node's streaming learner run over a recorded JointState stream.

`read_joint_stream` reads a rosbag2 JointState topic message by message the way the
`dynamics_learner` node receives it: the same `JointStateParser` (joints by name, rejections
counted by reason), the same time-reset rule (`time_reset_s`: a stamp that far backwards
resets instead of being rejected) and torques from `effort` or, as with the node's
`torque_source: command`, from a `Float64MultiArray` command topic (held on receive time).

`replay` then runs each model through the node's own objects, `InverseDynamicsStream` ->
`ContinualLearner.observe` (predict first, then score and store) -> `train_pending` (the
node's `updates_per_sample` budget, run in this thread so that a seed gives the same numbers
every time). Held-out blocks (`Holdout`) are predicted but never stored, so no test sample
reaches the buffer; the learner keeps streaming through them as a deployed node would.
Baselines come alongside: the previous torque (tau_{t-1}, the model's action input), a
linear regression refitted on all training samples before each block, and with a URDF the
rigid-body model (RNEA), all batched. Metrics and the report: `learning/report.py`.
"""
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, TYPE_CHECKING

import numpy as np
from robot_dynamics_learning.data.bag_io import hold_last, open_bag, read_topic
from robot_dynamics_learning.data.joint_velocity import (velocity_need, VELOCITY_WINDOW,
                                                         VelocitySource)
from robot_dynamics_learning.data.messages import (FieldNeed, FLOAT64_MULTI_ARRAY,
                                                   JOINT_STATE, JointSetChoice,
                                                   JointStateParser, Reason, RELOCK_AFTER,
                                                   StampBounds)
from robot_dynamics_learning.data.trajectory import joint_columns
from tqdm import tqdm

if TYPE_CHECKING:   # torch is imported lazily, when a model is built
    from robot_dynamics_learning.models.base import DynamicsModel

# Models the learner streams (the node's inverse models) and those that need a URDF.
STREAMED_MODELS = ('lstm', 'ac_rkn_inverse', 'ffnn', 'hybrid')
URDF_MODELS = ('hybrid', 'rigid_body')
BLOCK_REFIT_MODELS = ('gp',)   # fitted by `fit_data`, refitted on past training blocks
MODELS = STREAMED_MODELS + ('rigid_body',) + BLOCK_REFIT_MODELS
BASELINES = ('previous_torque', 'linear_regression', 'rigid_body')
COMMAND_TOPIC = '/effort_controller/commands'   # the node's default command_topic
MIN_SCORED = 2   # predicted samples a replay needs: the report's scores take at least 2


# How reports name a stream's `velocity_source`.
VELOCITY_WORDS = {'measured': 'measured', 'positions': 'differentiated from the positions',
                  'measured and positions': 'measured, else differentiated from the positions'}


def input_words(velocity_source: str, times: str) -> List[str]:
    """Return how a stream's velocities and times were got, as phrases for reports."""
    return [f'velocity {VELOCITY_WORDS[velocity_source]}'] + (
        ['times: the log times (header stamps are 0)'] if times == 'arrival' else [])


@dataclass
class JointStream:
    """
    The accepted JointState samples of a bag, in arrival order.

    stamp_s: (T,) header stamps (s) relative to the first accepted one (they jump back at a
    time reset); receive_s: (T,) bag log times since the first message (monotonic, the report's
    time axis); q, qd, tau: (T, n); reset_before: (T,) bool, a time reset precedes the
    sample; rejections: [(receive_s, reason)]; counts: RejectionCounter.as_dict();
    velocity_source: where qd comes from ('measured', 'positions' or 'measured and positions');
    times: what stamp_s holds ('header' stamps or 'arrival' times).
    """

    joint_names: List[str]
    stamp_s: np.ndarray
    receive_s: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    reset_before: np.ndarray
    rejections: List[Tuple[float, str]] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=dict)
    torque_source: str = 'effort'
    topic: str = ''
    velocity_source: str = 'measured'   # or 'positions' (differentiated), or both
    times: str = 'header'   # or 'arrival': the bag's log times (header stamps unset)

    def __len__(self) -> int:
        """Return the number of accepted samples."""
        return int(self.stamp_s.size)

    @property
    def rate_hz(self) -> float:
        """Return the median sample rate (from header stamps, resets excluded)."""
        steps = np.diff(self.stamp_s)[~self.reset_before[1:]]
        steps = steps[steps > 0]
        return float(1.0 / np.median(steps)) if steps.size else float('nan')

    @property
    def duration_s(self) -> float:
        """Return the bag time the samples span (receive times)."""
        return float(self.receive_s[-1] - self.receive_s[0]) if len(self) > 1 else 0.0

    def in_joint_order(self, wanted: Sequence[str]) -> 'JointStream':
        """Return the stream with the joints `wanted` only, in that order (`joint_columns`)."""
        columns = joint_columns(self.joint_names, wanted, self.topic)
        return dataclasses.replace(self, joint_names=list(wanted), q=self.q[:, columns],
                                   qd=self.qd[:, columns], tau=self.tau[:, columns])


def _command_order(joints: Sequence[str], command_joint_names: Optional[Sequence[str]]
                   ) -> List[int]:
    """Return the command array's index of each learned joint (its order: the controller's)."""
    from robot_dynamics_learning.learning.learner_params import uncommanded
    if not command_joint_names:
        return list(range(len(joints)))
    uncommanded(joints, command_joint_names, raise_error=True)   # as dynamics_learner refuses
    return [list(command_joint_names).index(joint) for joint in joints]


def pick_joint_topic(bag: Path, topic: Optional[str], typestore: str = 'jazzy') -> str:
    """Return `topic`, else /joint_states if present, else the bag's only JointState topic."""
    with open_bag(bag, typestore) as reader:
        joint_topics = sorted({c.topic for c in reader.connections if c.msgtype == JOINT_STATE})
        all_topics = sorted({c.topic for c in reader.connections})
    if topic is not None:
        if topic not in joint_topics:
            raise ValueError(f"{bag}: '{topic}' is not a JointState topic; JointState topics: "
                             f'{joint_topics}, all topics: {all_topics}')
        return topic
    if '/joint_states' in joint_topics or len(joint_topics) == 1:
        return '/joint_states' if '/joint_states' in joint_topics else joint_topics[0]
    raise ValueError(f'{bag}: choose the JointState topic with --topic: {joint_topics or "none"}'
                     f' (all topics: {all_topics})')


class StreamRecorder:
    """
    Collects JointState messages as the learner node takes them, for a `JointStream`.

    The node's `JointStateParser` (joints by name, rejections counted by reason), its
    time-reset rule (a stamp `time_reset_s` or more backwards resets instead of being
    rejected), its message times (`StampSource`: header stamps, or the receive times given
    to `add`) and its velocities (`VelocitySource`: measured, or differentiated from the
    positions; samples where that fit warms up are dropped, as the node skips them). Used by
    `read_joint_stream` and by the replay_evaluator node.
    """

    def __init__(self, joint_names: Optional[Sequence[str]] = None,
                 time_reset_s: float = 0.5, joint_settle_s: float = 1.0,
                 velocity_source: str = 'auto', velocity_window: int = VELOCITY_WINDOW,
                 stamp_source: str = 'auto') -> None:
        self.velocity = (velocity_source, velocity_window)   # as the node's `VelocitySource`
        self.parser = JointStateParser(
            joint_names, position=FieldNeed.REQUIRED, velocity=velocity_need(velocity_source),
            effort=FieldNeed.OPTIONAL, stamp_source=stamp_source,
            bounds=StampBounds(reset_after_ns=int(time_reset_s * 1e9),   # as dynamics_learner
                               relock_after=RELOCK_AFTER))
        # joint_names unset: held and chosen as dynamics_learner does (`JointSetChoice`).
        self.joint_sets = None if joint_names else JointSetChoice(joint_settle_s)
        self.rows: List[Tuple[int, Any]] = []
        self.rejections: List[Tuple[int, str]] = []
        self.resets: List[int] = []

    def add(self, msg: Any, receive_ns: int) -> None:
        """Take one message (rclpy or rosbags class) received at `receive_ns`."""
        if self.joint_sets is None:
            self._parse(msg, receive_ns)
            return
        refused = self.joint_sets.offer((msg, receive_ns), receive_ns * 1e-9, names=msg.name)
        if refused is not None:
            self.parser.counter.count(refused)
            self.rejections.append((receive_ns, refused.reason.value))
        if self.joint_sets.ready(receive_ns * 1e-9):
            self.adopt()

    def adopt(self) -> None:
        """Adopt the chosen joint set now and parse the held messages (also at the end)."""
        if self.joint_sets is None:
            return
        joint_sets, self.joint_sets = self.joint_sets, None
        if joint_sets.seen:
            self.parser.joint_names = list(joint_sets.choose()[0])
        for msg, receive_ns in joint_sets.take_held():
            self._parse(msg, receive_ns)

    def _parse(self, msg: Any, receive_ns: int) -> None:
        result = self.parser.parse(msg, receive_ns)
        if not result.ok:
            self.rejections.append((receive_ns, result.reason.value))
            return
        if result.value.time_reset:   # flagged only on a valid message, as in the node
            self.resets.append(len(self.rows))
        self.rows.append((receive_ns, result.value))

    def _velocities(self, samples: Sequence[Any]) -> np.ndarray:
        """Return (T, n) velocities as the node uses them; NaN rows while the fit warms up."""
        if self.velocity[0] != 'positions' and all(s.velocity is not None for s in samples):
            return np.stack([s.velocity for s in samples])
        source = VelocitySource(samples[0].position.size, *self.velocity)
        velocities = np.full((len(samples), source.n_joints), np.nan)
        resets = set(self.resets)
        for i, sample in enumerate(samples):
            if i in resets:
                source.reset()
            velocity = source.velocity(sample.stamp_ns * 1e-9, sample.position, sample.velocity)
            if velocity is not None:
                velocities[i] = velocity
        return velocities

    def _velocity_kind(self, samples: Sequence[Any]) -> str:
        """Return where the velocities came from, for the report."""
        if self.velocity[0] == 'positions':
            return 'positions'
        carried = [s.velocity is not None for s in samples]
        return ('measured' if all(carried) else 'positions' if not any(carried)
                else 'measured and positions')

    def stream(self, first_ns: int, topic: str, tau: Optional[np.ndarray] = None,
               keep: Optional[np.ndarray] = None, source: str = 'effort') -> JointStream:
        """
        Return the accepted samples as a `JointStream` (receive times since `first_ns`).

        tau: (T, n) torques of the rows when the messages carry no effort; keep: (T,) rows
        to keep (e.g. those with a torque command before them). Without `tau`, messages
        without effort are skipped and counted as missing_field (the node trains on none of
        them); a time reset before a dropped row moves to the next kept one.
        """
        self.adopt()   # a stream shorter than the settling window
        if not self.rows:
            counter = self.parser.counter
            raise ValueError(f'{topic}: no valid JointState message '
                             f'({counter.as_dict()}; last reasons: '
                             f"{'; '.join(counter.last_detail.values())})")
        samples = [s for _, s in self.rows]
        receive_ns = np.array([r for r, _ in self.rows], np.int64)
        stamp_ns = np.array([s.stamp_ns for s in samples], np.int64)
        q = np.stack([s.position for s in samples])
        qd = self._velocities(samples)
        keep = np.ones(len(samples), bool) if keep is None else keep
        keep = keep & np.isfinite(qd[:, 0])   # NaN: the velocity fit warms up
        rejections, counts = list(self.rejections), self.parser.counter.as_dict()
        if tau is None:
            carries = np.array([s.effort is not None for s in samples])
            if not carries.any():
                raise ValueError(f'{topic}: the messages carry no effort')
            tau = np.stack([np.full(q.shape[1], np.nan) if s.effort is None else s.effort
                            for s in samples])
            missing = receive_ns[~carries]
            if missing.size:
                rejections = sorted(rejections + [(int(r), Reason.MISSING_FIELD.value)
                                                  for r in missing])
                counts['accepted'] -= missing.size
                counts[Reason.MISSING_FIELD.value] = counts.get(Reason.MISSING_FIELD.value,
                                                                0) + missing.size
            keep = keep & carries
        if not keep.any():
            raise ValueError(f'{topic}: no message has a torque from {source}')
        period = np.zeros(len(samples), int)   # count of time resets up to each row
        period[[i for i in self.resets if i < len(samples)]] = 1
        period = np.cumsum(period)[keep]
        tau, q, qd, stamp_ns, receive_ns = (a[keep] for a in (tau, q, qd, stamp_ns, receive_ns))
        reset_before = np.diff(period, prepend=period[:1]) > 0
        return JointStream(
            joint_names=list(self.parser.joint_names), stamp_s=(stamp_ns - stamp_ns[0]) * 1e-9,
            receive_s=(receive_ns - first_ns) * 1e-9, q=q, qd=qd, tau=tau,
            reset_before=reset_before,
            rejections=[((r - first_ns) * 1e-9, reason) for r, reason in rejections],
            counts=counts, torque_source=source, topic=topic,
            velocity_source=self._velocity_kind(samples),
            times='arrival' if self.parser.times.receipt else 'header')


def check_command_topic(bag: Path, topic: str, types: Dict[str, str]) -> None:
    """
    Refuse a torque command topic the bag lacks, or of another type, naming the bag's topics.

    Why: when the joint states carry effort the topic is never read, so a typo went unnoticed.
    """
    if types.get(topic) != FLOAT64_MULTI_ARRAY:
        found = f'is {types[topic]}' if topic in types else 'is not in the bag'
        raise ValueError(f"{bag}: command topic '{topic}' {found}, not a "
                         f'{FLOAT64_MULTI_ARRAY} topic; the bag has {sorted(types)}')


def read_joint_stream(bag: Path, topic: Optional[str] = None,
                      command_topic: Optional[str] = None,
                      joint_names: Optional[Sequence[str]] = None, time_reset_s: float = 0.5,
                      typestore: str = 'jazzy', progress: bool = False,
                      joint_settle_s: float = 1.0,
                      command_joint_names: Optional[Sequence[str]] = None,
                      velocity_source: str = 'auto',
                      velocity_window: int = VELOCITY_WINDOW,
                      stamp_source: str = 'auto') -> JointStream:
    """
    Read a JointState topic as the learner node receives it (`StreamRecorder`).

    joint_names None: the joint set the node adopts (`JointSetChoice` over the messages of
    the first joint_settle_s, receive time). Torques: the messages' effort; when they
    carry none, `command_topic` (default the node's /effort_controller/commands if the bag
    has it; its array in the order of `command_joint_names`, unset: the learned joints')
    held on receive time, commands received at the same instant included (as `rdl train` on
    bags). Velocities and times as the node takes them (`velocity_source`, `velocity_window`;
    `stamp_source`, the bag's log times standing in for arrival times). Raises ValueError
    naming what is missing.
    """
    topic = pick_joint_topic(bag, topic, typestore)
    with open_bag(bag, typestore) as reader:
        connections = [c for c in reader.connections if c.topic == topic]
        recorder = StreamRecorder(joint_names, time_reset_s, joint_settle_s, velocity_source,
                                  velocity_window, stamp_source)
        if command_topic is not None:
            check_command_topic(bag, command_topic, {c.topic: c.msgtype
                                                     for c in reader.connections})
        has_commands = any(c.topic == (command_topic or COMMAND_TOPIC)
                           and c.msgtype == FLOAT64_MULTI_ARRAY for c in reader.connections)
        first_ns = reader.start_time
        total = sum(c.msgcount for c in connections)
        deserialize = reader.typestore.deserialize_cdr
        for _, receive_ns, raw in tqdm(reader.messages(connections=connections), total=total,
                                       disable=not progress, unit='msg', desc=f'read {topic}',
                                       leave=False, mininterval=0.5):
            try:
                msg = deserialize(raw, JOINT_STATE)
            except Exception as error:  # noqa: B902 - one corrupt message is a rejection
                recorder.rejections.append((receive_ns, f'malformed: {type(error).__name__}'))
                continue
            recorder.add(msg, receive_ns)
    recorder.adopt()   # a bag shorter than the settling window
    carries = [s.effort is not None for _, s in recorder.rows]
    if not recorder.rows or any(carries) and (all(carries) or (command_topic is None
                                                               and not has_commands)):
        return recorder.stream(first_ns, topic)   # effort; messages without it are skipped
    if command_topic is None and not has_commands:
        raise ValueError(f'{bag}:{topic}: the messages carry no effort and there is no torque '
                         f'command topic ({COMMAND_TOPIC} or --command-topic)')
    command_topic = command_topic or COMMAND_TOPIC
    joints = list(recorder.parser.joint_names)
    order = _command_order(joints, command_joint_names)
    commands = read_topic(bag, command_topic, size=len(command_joint_names or joints),
                          typestore=typestore)
    receive_ns = np.array([r for r, _ in recorder.rows], np.int64)
    tau, valid = hold_last(commands.receive_ns, commands.fields['data'][:, order], receive_ns)
    # Joint states before the first command have no torque.
    return recorder.stream(first_ns, topic, tau, valid, f'command {command_topic}')


@dataclass(frozen=True)
class Holdout:
    """
    Which blocks of `block_s` seconds (receive time) are held back from training.

    mode 'none': pure prequential; 'every': every `every`-th block (the `every`-th, the
    2 `every`-th, ...); 'after': every block starting after `fraction` of the stream.
    """

    mode: str = 'every'
    every: int = 5
    fraction: float = 0.7
    block_s: float = 5.0

    def __post_init__(self) -> None:
        """Reject settings that hold back nothing sensible, naming the value."""
        if self.mode not in ('none', 'every', 'after'):
            raise ValueError(f"holdout mode must be none, every or after, got '{self.mode}'")
        if self.every < 2:
            raise ValueError(f'holdout every must be >= 2 (1 would train on nothing), got '
                             f'{self.every}')
        if not 0.0 < self.fraction < 1.0:
            raise ValueError(f'holdout fraction must be in (0, 1), got {self.fraction}')
        if not self.block_s > 0:
            raise ValueError(f'block_s must be > 0, got {self.block_s}')

    @classmethod
    def parse(cls, text: str, block_s: float) -> 'Holdout':
        """Parse 'none', 'every:K' or 'after:F' (the `--holdout` option)."""
        mode, _, value = text.partition(':')
        try:
            if mode == 'every':
                return cls('every', every=int(value or 5), block_s=block_s)
            if mode == 'after':
                return cls('after', fraction=float(value or 0.7), block_s=block_s)
        except ValueError as error:
            raise ValueError(f"bad --holdout '{text}': {error}") from None
        return cls(mode, block_s=block_s)

    def blocks(self, receive_s: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Return (block index (T,), held out (T,) bool) for sample times `receive_s`."""
        start = receive_s[0]
        block = np.floor((receive_s - start) / self.block_s + 1e-9).astype(int)   # ns-rounded
        if self.mode == 'none':
            return block, np.zeros(block.size, bool)
        if self.mode == 'every':
            return block, block % self.every == self.every - 1
        cut = start + self.fraction * (receive_s[-1] - start)
        first = int(np.ceil((cut - start) / self.block_s))
        return block, block >= first


@dataclass
class ModelRun:
    """
    One model's predictions over the stream.

    prediction, std: (T, n) (NaN where not predicted: differentiator warm-up, or a model
    that had nothing to fit yet; std only for models with a variance); latency_s: (T,)
    seconds per `observe` (NaN for batched baselines); steps: (T,) training updates done
    after each sample; trained: (T,) bool, the sample entered the training buffer.
    """

    name: str
    kind: str                    # 'model' or 'baseline'
    prediction: np.ndarray
    std: Optional[np.ndarray] = None
    latency_s: Optional[np.ndarray] = None
    steps: Optional[np.ndarray] = None
    trained: Optional[np.ndarray] = None
    wall_s: float = 0.0
    train_s: float = 0.0
    rejected_steps: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Features:
    """The inverse-dynamics samples of the stream: what `InverseDynamicsStream` gives."""

    observation: np.ndarray      # (T, 3 n) [q, qd, qdd]; NaN during warm-up
    action: np.ndarray           # (T, n) tau_{t-1} (zeros at a segment start)
    valid: np.ndarray            # (T,) bool: the differentiator is warm


def stream_features(stream: JointStream, accel_window: int) -> Features:
    """Run the node's `InverseDynamicsStream` once over the samples (resets included)."""
    from robot_dynamics_learning.learning.continual import InverseDynamicsStream
    from robot_dynamics_learning.signals.causal import CausalDifferentiator
    n = len(stream.joint_names)
    features = InverseDynamicsStream(n, CausalDifferentiator(n, window=accel_window))
    observation = np.full((len(stream), 3 * n), np.nan)
    action = np.zeros((len(stream), n))
    valid = np.zeros(len(stream), bool)
    for i in range(len(stream)):
        if stream.reset_before[i]:
            features.reset()
        out = features.sample(stream.stamp_s[i], stream.q[i], stream.qd[i], stream.tau[i])
        if out is not None:
            observation[i], action[i], _ = out
            valid[i] = True
    return Features(observation, action, valid)


def model_settings(model_type: str, model_config: Optional[Dict[str, Any]],
                   urdf: Optional[str]) -> Dict[str, Any]:
    """
    Return the model's config dict, checked by its config class (a clear ValueError).

    URDF models get `urdf` unless their config names one; without any it is a ValueError
    saying so (the caller skips the model with that reason).
    """
    from robot_dynamics_learning.models.registry import model_builder
    settings = dict(model_config or {})
    if model_type in URDF_MODELS and 'urdf' not in settings:
        if not urdf:
            raise ValueError(f'{model_type} needs the robot URDF (--urdf)')
        settings['urdf'] = str(urdf)
    try:
        model_builder(model_type).config_class.from_dict(settings)
    except (TypeError, ValueError) as error:
        raise ValueError(f'model_config for {model_type}: {error}') from None
    return settings


def check_urdf_joints(model_type: str, model: 'DynamicsModel',
                      joint_names: Sequence[str]) -> None:
    """Refuse in one line when the bag's joints and the URDF's moving joints differ."""
    urdf_joints = model.joint_names
    if urdf_joints is not None and list(urdf_joints) != list(joint_names):
        raise ValueError(f'{model_type}: the bag joints {list(joint_names)} do not match the '
                         f'URDF joints {list(urdf_joints)}')


def stream_model(model_type: str, settings: Dict[str, Any], stream: JointStream,
                 features: Features, held_out: np.ndarray, learner_config: Any, seed: int,
                 bar: Optional[tqdm] = None) -> ModelRun:
    """
    Predict-then-train over the stream with the node's `ContinualLearner` (one thread).

    Held-out samples are predicted with target None: the learner neither scores nor
    stores them.
    """
    from robot_dynamics_learning.learning.continual import ContinualLearner
    from robot_dynamics_learning.models.registry import build_model
    import torch
    n = len(stream.joint_names)
    torch.manual_seed(seed)
    model = build_model(model_type, settings, 3 * n, n, n)
    check_urdf_joints(model_type, model, stream.joint_names)
    learner = ContinualLearner(model, 3 * n, n, n, learner_config, np.random.default_rng(seed))
    count = len(stream)
    prediction = np.full((count, n), np.nan)
    std = None
    latency = np.full(count, np.nan)
    steps = np.zeros(count, np.int64)
    trained = np.zeros(count, bool)
    started = time.perf_counter()
    train_pending = learner.trainer.train_pending
    for i in range(count):
        if stream.reset_before[i]:
            learner.reset()
        if features.valid[i]:
            target = None if held_out[i] else stream.tau[i]
            t0 = time.perf_counter()
            mean, variance = learner.observe(stream.stamp_s[i], features.observation[i],
                                             features.action[i], target)
            latency[i] = time.perf_counter() - t0
            prediction[i] = mean
            if variance is not None:
                if std is None:
                    std = np.full((count, n), np.nan)
                std[i] = np.sqrt(np.maximum(variance, 0.0))
            trained[i] = target is not None
            train_pending()
        steps[i] = learner.trainer.steps
        if bar is not None and i % 256 == 255:
            bar.update(256)
    if bar is not None:
        bar.update(count % 256)
    return ModelRun(model_type, 'model', prediction, std, latency, steps, trained,
                    wall_s=time.perf_counter() - started,
                    train_s=learner.trainer.busy_seconds,
                    rejected_steps=learner.trainer.rejected_steps,
                    extra={'buffer_samples': learner.buffer.total,
                           'segment_breaks': learner.buffer.breaks,
                           'weights_version': learner.predictor.version})


def previous_torque(features: Features) -> ModelRun:
    """Baseline tau^_t = tau_{t-1}: the measured torque of the previous sample."""
    prediction = np.where(features.valid[:, None], features.action, np.nan)
    return ModelRun('previous_torque', 'baseline', prediction)


def _regressors(observation: np.ndarray) -> np.ndarray:
    """Linear-regression inputs [q, qd, qdd, 1] (T, 3 n + 1)."""
    return np.concatenate([observation, np.ones((observation.shape[0], 1))], axis=1)


def block_refit(name: str, fit, predict, features: Features, tau: np.ndarray,
                blocks: np.ndarray, held_out: np.ndarray, held_out_only: bool = False,
                growth: float = 1.0) -> ModelRun:
    """
    Before each block, fit on every training sample of the earlier blocks; predict the block.

    `fit(x (N, 3 n), y (N, n))` returns a fitted object or None (too few samples);
    `predict(fitted, x)` returns (M, n). Held-out samples are never fitted on.
    held_out_only: predict (and refit before) held-out blocks only; growth: refit only once
    the training samples grew by this factor since the last fit (else the last fit, made on
    earlier data only, predicts): both for costly fits.
    """
    started = time.perf_counter()
    prediction = np.full(tau.shape, np.nan)
    usable = features.valid & ~held_out
    fitted, fits, fitted_on = None, 0, 0
    chosen = np.unique(blocks[held_out]) if held_out_only else np.unique(blocks)
    for block in chosen:
        rows = np.flatnonzero((blocks == block) & features.valid)
        past = np.flatnonzero(usable & (blocks < block))
        if past.size and (fitted is None or past.size >= growth * fitted_on):
            fitted = fit(features.observation[past], tau[past])
            fitted_on = past.size if fitted is not None else 0
            fits += 1
        if fitted is not None and rows.size:
            prediction[rows] = predict(fitted, features.observation[rows])
    return ModelRun(name, 'baseline' if name in BASELINES else 'model', prediction,
                    wall_s=time.perf_counter() - started, extra={'refits': fits})


def linear_regression(features: Features, tau: np.ndarray, blocks: np.ndarray,
                      held_out: np.ndarray) -> ModelRun:
    """Baseline: tau = W [q, qd, qdd, 1] by least squares, refitted before each block."""
    def fit(x, y):
        if x.shape[0] <= x.shape[1]:
            return None
        return np.linalg.lstsq(_regressors(x), y, rcond=None)[0]

    return block_refit('linear_regression', fit, lambda w, x: _regressors(x) @ w, features,
                       tau, blocks, held_out)


def gaussian_process(settings: Dict[str, Any], features: Features, tau: np.ndarray,
                     blocks: np.ndarray, held_out: np.ndarray, seed: int) -> ModelRun:
    """
    Fit the exact GP (`models/gp.py`) on all earlier training blocks before held-out ones.

    No prequential score, and a refit only once the training data doubled: one fit costs
    minutes on a small CPU.
    """
    from robot_dynamics_learning.core_types import SequenceBatch
    from robot_dynamics_learning.models.registry import build_model
    import torch
    n = tau.shape[1]

    def fit(x, y):
        if x.shape[0] < 10:
            return None
        torch.manual_seed(seed)
        model = build_model('gp', settings, 3 * n, n, n)
        t = torch.as_tensor
        model.fit_data(SequenceBatch(t(x[None], dtype=torch.float32),
                                     t(np.zeros((1, x.shape[0], n)), dtype=torch.float32),
                                     t(y[None], dtype=torch.float32)))
        return model

    def predict(model, x):
        with torch.no_grad():
            return model._predict(torch.as_tensor(x, dtype=torch.float32)).numpy()

    return block_refit('gp', fit, predict, features, tau, blocks, held_out, held_out_only=True,
                       growth=2.0)


def rigid_body(settings: Dict[str, Any], stream: JointStream, features: Features) -> ModelRun:
    """Baseline: the URDF's RNEA on every sample, batched (nothing is learned)."""
    from robot_dynamics_learning.core_types import SequenceBatch
    from robot_dynamics_learning.models.registry import build_model
    import torch
    n = len(stream.joint_names)
    model = build_model('rigid_body', settings, 3 * n, n, n)
    check_urdf_joints('rigid_body', model, stream.joint_names)
    started = time.perf_counter()
    prediction = np.full(stream.tau.shape, np.nan)
    rows = np.flatnonzero(features.valid)
    with torch.no_grad():
        for chunk in np.array_split(rows, max(1, rows.size // 20000)):
            obs = torch.as_tensor(features.observation[chunk][None], dtype=torch.float32)
            zeros = torch.zeros(1, chunk.size, n)
            batch = SequenceBatch(obs, zeros, zeros)
            prediction[chunk] = model(batch).mean[0].numpy()
    return ModelRun('rigid_body', 'baseline', prediction, wall_s=time.perf_counter() - started)


def find_config(name: str) -> Path:
    """Return config/`name` from the source tree, else from the installed share folder."""
    from robot_dynamics_learning.resources import resource
    return resource(f'config/{name}')


def load_learner_params(path: Optional[Path] = None) -> Dict[str, Any]:
    """
    Return dynamics_learner's settings from a ROS params YAML (default config/learner.yaml).

    Read into `DynamicsLearnerConfig`, the class the node declares its parameters from (the
    same blocks `--params-file` applies, every setting the file omits at the node's
    default), and returned as a dict of field values for the report.
    """
    from robot_dynamics_learning.learning.learner_params import learner_params
    config = learner_params(path)
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(config)}


@dataclass
class ReplayResult:
    """Everything the report needs: the stream, the split and every model's run."""

    stream: JointStream
    blocks: np.ndarray
    held_out: np.ndarray
    holdout: Holdout
    runs: List[ModelRun]
    skipped: Dict[str, str]
    params: Dict[str, Any]
    seed: int
    bag: str = ''


def check_predicted(stream: JointStream, features: Features, accel_window: int) -> None:
    """Refuse a stream with fewer than 2 samples past the warm-up: nothing could be scored."""
    predicted = int(features.valid.sum())
    if predicted < MIN_SCORED:
        raise ValueError(f'{stream.topic}: too few samples to replay: {len(stream)} accepted, '
                         f'{predicted} of them past the {accel_window}-sample warm-up of the '
                         f'acceleration estimate (accel_window), {MIN_SCORED} needed; record '
                         'a longer bag')


def check_split(stream: JointStream, holdout: Holdout, held: np.ndarray,
                trained: np.ndarray) -> None:
    """
    Refuse blocks that hold back none (or all) of the predicted samples, naming good lengths.

    Why: the report then silently scored the other split, its verdict no longer on unseen data.
    """
    if holdout.mode == 'none' or (held.any() and trained.any()):
        return
    if holdout.mode == 'every':
        period = 1.0 / stream.rate_hz if np.isfinite(stream.rate_hz) else 0.0
        advice = (f'a --block-s between {period:.3g} s (one sample) and '
                  f'{stream.duration_s / holdout.every:.3g} s')
    else:
        advice = (f'a --block-s under {(1.0 - holdout.fraction) * stream.duration_s:.3g} s or '
                  'a smaller after:F')
    raise ValueError(f'--holdout {holdout.mode} with --block-s {holdout.block_s:g} holds back '
                     f"{'all' if held.any() else 'none'} of the {int((held | trained).sum())} "
                     f'predicted samples ({stream.duration_s:.3g} s of bag): choose {advice}, '
                     'or --holdout none')


def replay(stream: JointStream, models: Sequence[str], urdf: Optional[str],
           params: Dict[str, Any], holdout: Holdout, seed: int = 0,
           progress: bool = False) -> ReplayResult:
    """
    Run `models` and the baselines over `stream`; models that cannot run are skipped.

    params: dynamics_learner parameter values (`load_learner_params`); its `model_config`
    applies to the model named by its `model`. A skipped model maps to its one-line reason.
    """
    from robot_dynamics_learning.learning.learner_params import DynamicsLearnerConfig
    from robot_dynamics_learning.params import from_values
    import torch
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f'unknown model(s) {unknown}; choose from {list(MODELS)}')
    torch.set_num_threads(int(params.get('torch_threads', 1)))
    config = from_values(DynamicsLearnerConfig, params, 'learner params').learner_config()
    features = stream_features(stream, int(params['accel_window']))
    check_predicted(stream, features, int(params['accel_window']))
    blocks, held_out = holdout.blocks(stream.receive_s)
    check_split(stream, holdout, features.valid & held_out, features.valid & ~held_out)
    skipped: Dict[str, str] = {}
    runs = [previous_torque(features),
            linear_regression(features, stream.tau, blocks, held_out)]
    wanted = list(dict.fromkeys(list(models) + (['rigid_body'] if urdf else [])))
    settings: Dict[str, Dict[str, Any]] = {}
    for model_type in wanted:
        own = params.get('model') == model_type
        try:
            settings[model_type] = model_settings(
                model_type, _json(params.get('model_config')) if own else {}, urdf)
        except ValueError as error:
            skipped[model_type] = str(error)
    streamed = [m for m in settings if m in STREAMED_MODELS]
    with tqdm(total=len(stream) * len(streamed), disable=not progress, unit='sample',
              desc='replay', mininterval=0.5) as bar:
        for model_type in settings:
            if bar is not None:
                bar.set_postfix_str(model_type)
            try:
                if model_type == 'rigid_body':
                    runs.append(rigid_body(settings[model_type], stream, features))
                elif model_type == 'gp':
                    runs.append(gaussian_process(settings[model_type], features, stream.tau,
                                                 blocks, held_out, seed))
                else:
                    runs.append(stream_model(model_type, settings[model_type], stream,
                                             features, held_out, config, seed, bar))
            except ValueError as error:   # e.g. joints that do not match the URDF
                skipped[model_type] = str(error)
    return ReplayResult(stream, blocks, held_out, holdout, runs, skipped, dict(params), seed)


def _json(value: Any) -> Dict[str, Any]:
    """model_config as the node takes it: a JSON object string (or already a dict)."""
    import json
    if isinstance(value, dict):
        return value
    return json.loads(value or '{}')


def recorded_result(stream: JointStream, predictions: Dict[str, Tuple[np.ndarray, Any]],
                    params: Dict[str, Any], urdf: Optional[str] = None,
                    holdout: Optional[Holdout] = None) -> ReplayResult:
    """
    Wrap predictions recorded from live learner nodes (the launch route) for the report.

    predictions: name -> ((T, n) means aligned with `stream`, NaN where none arrived; (T, n)
    std or None). The baselines are computed here as in `replay`, on the same samples.
    holdout: default none, with `rdl replay`'s default blocks (a twentieth of the stream) for
    the linear regression's refits.
    """
    holdout = holdout or Holdout('none', block_s=max(stream.duration_s / 20, 1e-3))
    features = stream_features(stream, int(params['accel_window']))
    blocks, held_out = holdout.blocks(stream.receive_s)
    runs = [previous_torque(features), linear_regression(features, stream.tau, blocks,
                                                         held_out)]
    skipped: Dict[str, str] = {}
    if urdf:
        try:
            runs.append(rigid_body(model_settings('rigid_body', {}, urdf), stream, features))
        except ValueError as error:
            skipped['rigid_body'] = str(error)
    for name, (mean, std) in predictions.items():
        runs.append(ModelRun(name, 'model', mean, std))
    return ReplayResult(stream, blocks, held_out, holdout, runs, skipped, dict(params),
                        int(params.get('seed', 0)))
