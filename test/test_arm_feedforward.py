"""Feed-forward arm controller core: tracks on MuJoCo, hot-reloads checkpoints, fails safe."""
import numpy as np
import pytest
from robot_dynamics_learning.control.arm_feedforward import (ArmController,
                                                             ArmControllerConfig,
                                                             FunctionFeedforward,
                                                             LearnedFeedforward,
                                                             no_feedforward,
                                                             RigidBodyFeedforward)
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.signals.causal import CausalDifferentiator
from robot_dynamics_learning.sim.mujoco_arm import MujocoArm, MujocoArmConfig

URDF = resource('urdf/panda.urdf')
FRICTIONLESS = {'friction': (0.0,) * 7, 'damping': (0.0,) * 7, 'armature': (0.0,) * 7}
MS = 1_000_000


def make_controller(feedforward, arm: MujocoArm, **config) -> ArmController:
    lower, upper = arm.model.jnt_range.T
    return ArmController(ArmControllerConfig(**config), feedforward, lower, upper,
                         arm.effort_limit)


def tracking_rmse(feedforward, seconds: float = 3.0) -> float:
    """Run the closed loop on a frictionless MuJoCo arm; RMSE (rad) after the approach."""
    arm = MujocoArm(MujocoArmConfig(**FRICTIONLESS))
    controller = make_controller(feedforward, arm, approach_s=1.0)
    arm.reset(arm.model.jnt_range.mean(axis=1))
    errors = []
    for k in range(int(seconds * 1000)):
        state = arm.state()
        stamp = (k + 1) * MS
        arm.command(controller.on_state(stamp, stamp, state.position, state.velocity))
        arm.step()
        if k >= 1000:
            errors.append(controller.last_error)
    return float(np.sqrt(np.mean(np.square(errors))))


def test_urdf_feedforward_tracks_the_exact_world_far_better_than_pd():
    pd = tracking_rmse(no_feedforward)
    rigid_body = tracking_rmse(RigidBodyFeedforward(URDF))
    assert rigid_body < 2e-3 < pd and rigid_body < pd / 10


def test_approach_starts_at_the_arm_and_ends_on_the_trajectory():
    arm = MujocoArm()
    controller = make_controller(no_feedforward, arm, approach_s=2.0)
    start = arm.model.jnt_range.mean(axis=1) + 0.1
    controller.on_state(MS, MS, start, np.zeros(7))
    q, qd, _ = controller.reference_at(0.0)
    np.testing.assert_allclose(q, start)
    np.testing.assert_allclose(qd, 0.0)
    for reached, goal in zip(controller.reference_at(2.0),
                             controller.reference(np.array([0.0]))):
        np.testing.assert_allclose(reached, goal[0], atol=1e-9)
    # Continuous with the trajectory: no step in velocity or acceleration for the PD to see.
    for before, after in zip(controller.reference_at(2.0 - 1e-6),
                             controller.reference_at(2.0 + 1e-6)):
        np.testing.assert_allclose(before, after, atol=1e-4)


class CountingFeedforward(FunctionFeedforward):
    """Zero torque; counts the resets the controller asks for."""

    def __init__(self) -> None:
        super().__init__(lambda t, q, qd, qdd: np.zeros_like(q))
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1


def test_stale_states_brake_and_control_restarts_only_from_a_newer_state():
    arm = MujocoArm()
    feedforward = CountingFeedforward()
    controller = make_controller(feedforward, arm, stale_timeout_s=0.02)
    q = arm.model.jnt_range.mean(axis=1)
    assert controller.on_state(100 * MS, 100 * MS, q, np.zeros(7)) is not None
    assert controller.watchdog(110 * MS) is None
    np.testing.assert_array_equal(controller.watchdog(130 * MS), np.zeros(7))
    controller.watchdog(140 * MS)
    assert controller.counts['brake_stale'] == 1
    # Delivered late: the old state is dropped; a future-stamped one too.
    assert controller.on_state(100 * MS, 101 * MS, q, np.zeros(7)) is None
    assert controller.on_state(200 * MS, 140 * MS, q, np.zeros(7)) is None
    assert controller.on_state(100 * MS, 140 * MS, q, np.zeros(7)) is None
    assert controller.on_state(141 * MS, 141 * MS, q + 0.2, np.zeros(7)) is not None
    np.testing.assert_allclose(controller.reference_at(0.0)[0], q + 0.2)   # new approach
    assert {k: controller.counts[k] for k in ('rejected_future_stamp', 'rejected_stale',
                                              'skipped_after_brake', 'restarts')} == {
        'rejected_future_stamp': 1, 'rejected_stale': 1, 'skipped_after_brake': 1,
        'restarts': 1}
    assert feedforward.resets == 2   # the first start and the restart: state forgotten


def test_outputs_are_clipped_and_never_non_finite():
    arm = MujocoArm()
    q = arm.model.jnt_range.mean(axis=1)
    huge = make_controller(FunctionFeedforward(lambda t, q, qd, qdd: np.full(7, 1e3)), arm)
    np.testing.assert_array_equal(huge.on_state(MS, MS, q, np.zeros(7)), arm.effort_limit)
    broken = make_controller(FunctionFeedforward(lambda t, q, qd, qdd: np.full(7, np.nan)),
                             arm)
    np.testing.assert_array_equal(broken.on_state(MS, MS, q, np.zeros(7)), np.zeros(7))
    assert huge.counts['clipped'] == 1 and broken.counts['non_finite_output'] == 1
    assert broken.counts['commands'] == 0


def test_a_state_the_arm_cannot_be_in_is_refused_and_the_watchdog_brakes():
    """One state at 1e300 rad at a (re)start made the approach reference 1e300: full effort."""
    arm = MujocoArm()
    controller = make_controller(no_feedforward, arm)
    lower, upper = arm.model.jnt_range.T
    q = arm.model.jnt_range.mean(axis=1)
    garbage = [(np.full(7, 1e300), np.zeros(7)),   # finite, so the parser let it through
               (np.degrees(upper), np.zeros(7)),   # a driver in degrees
               (q, np.full(7, 3.4e38))]            # float32's largest: a driver's "unknown"
    for k, (bad_q, bad_qd) in enumerate(garbage, start=1):
        assert controller.on_state(k * MS, k * MS, bad_q, bad_qd) is None
    assert controller.counts['rejected_implausible'] == 3 and controller.counts['commands'] == 0
    np.testing.assert_array_equal(controller.watchdog(10 * MS), np.zeros(7))
    edge = upper + 0.1   # overshoot: still the arm
    torque = controller.on_state(11 * MS, 11 * MS, edge, np.zeros(7))
    assert torque is not None and np.all(np.isfinite(torque))
    assert controller.counts['rejected_implausible'] == 3


def test_learned_feedforward_falls_back_then_hot_reloads_newer_checkpoints(tmp_path):
    names = [f'panda_joint{i}' for i in range(1, 8)]
    rigid_body = RigidBodyFeedforward(URDF)
    learned = LearnedFeedforward(tmp_path, names, fallback=lambda t, q, qd, qdd: np.ones(7),
                                 differentiator=CausalDifferentiator(7, window=5))
    q, qd, qdd = np.full(7, 0.1), np.full(7, 0.2), np.full(7, 0.3)
    assert learned.poll() is None
    np.testing.assert_array_equal(learned(0.0, q, qd, qdd), np.ones(7))
    model = build_model('rigid_body', {'urdf': str(URDF)}, 21, 7, 7)
    folder = CheckpointDirectory(tmp_path)
    folder.save(model, names)
    assert 'using checkpoint' in learned.poll() and learned.poll() is None
    # Until the acceleration fit is warm, qdd_ref; then the fit of qd_ref (constant: 0).
    np.testing.assert_allclose(learned(0.001, q, qd, qdd), rigid_body(0, q, qd, qdd), rtol=1e-5)
    for k in range(2, 6):
        tau = learned(k * 1e-3, q, qd, qdd)
    np.testing.assert_allclose(tau, rigid_body(0, q, qd, np.zeros(7)), rtol=1e-5)
    # A newer model replaces it between calls; a corrupt newest file keeps the last one.
    heavier = build_model('rigid_body', {'urdf': str(URDF)}, 21, 7, 7)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(heavier.body, 'rnea', lambda *x: 2 * model.body.rnea(*x))
        folder.save(heavier, names)
    learned.poll()
    assert learned.loads == 2 and learned.fallback_calls == 1
    (tmp_path / 'model_000009.pt').write_bytes(b'truncated')
    assert learned.poll() is None and learned.path.name == 'model_000001.pt'
    wrong = LearnedFeedforward(tmp_path, names[::-1], fallback=no_feedforward,
                               differentiator=CausalDifferentiator(7))
    (tmp_path / 'model_000009.pt').unlink()
    assert 'not loaded' in wrong.poll() and wrong.load_errors == 1


def test_learned_feedforward_refuses_a_checkpoint_worse_on_the_measured_samples(tmp_path):
    """An online snapshot fitted to the last second can be worse elsewhere: it is not used."""
    names = [f'panda_joint{i}' for i in range(1, 8)]
    truth = RigidBodyFeedforward(URDF)
    learned = LearnedFeedforward(tmp_path, names, fallback=no_feedforward,
                                 differentiator=CausalDifferentiator(7, window=5),
                                 gate_samples=1000)
    ungated = LearnedFeedforward(tmp_path, names, fallback=no_feedforward,
                                 differentiator=CausalDifferentiator(7, window=5),
                                 gate_samples=0)
    folder = CheckpointDirectory(tmp_path)
    config = {'urdf': str(URDF), 'learn_friction': True}
    good = build_model('rigid_body', config, 21, 7, 7)
    folder.save(good, names)
    assert 'using checkpoint' in learned.poll() and 'using checkpoint' in ungated.poll()
    for k in range(1200):   # the arm moves on sines; its torque is the URDF's
        t = k * 1e-3
        phase = 2.0 * t + np.arange(7)
        q, qd, qdd = 0.3 * np.sin(phase), 0.6 * np.cos(phase), -1.2 * np.sin(phase)
        for feedforward in (learned, ungated):
            feedforward.observe(t, q, qd, truth(t, q, qd, qdd))
    worse = build_model('rigid_body', config, 21, 7, 7)
    worse.body.log_friction.data.fill_(np.log(3.0))   # 3 N m of friction the arm lacks
    folder.save(worse, names)
    line = learned.poll()
    assert 'not used' in line and learned.refused == 1 and learned.loads == 1, line
    assert 'using checkpoint' in ungated.poll()   # gate_samples 0: no gate
    assert learned.poll() is None   # refused once, not scored again
    folder.save(good, names)   # as good as the model in use: taken
    assert 'using checkpoint' in learned.poll() and learned.loads == 2
