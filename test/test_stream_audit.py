"""dynamics_learner holds its first samples to the offline data checks, over real DDS."""
import json
import time

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import load_urdf, rnea
from robot_dynamics_learning.learning import replay_cli
from robot_dynamics_learning.learning.stream_audit import StreamAudit
from robot_dynamics_learning.nodes.conversions import joint_state_msg
from ros_util import (learner_and_arm, LEARNER_PACE_S, wait_for, watch_diagnostics,
                      watch_predictions)
from test_velocity_check import _arm, _csv, CONFIGS, URDF
import torch

JOINTS = ['joint1', 'joint2']


def _feed(audit: StreamAudit, arm, q_scale: float = 1.0, tau_scale: float = 1.0) -> bool:
    """Stream the arm into the audit (q and qd times q_scale); True if it completed once."""
    done = [audit.add(t, q * q_scale, qd * q_scale, tau * tau_scale)
            for t, q, qd, tau in zip(arm.time, arm.q, arm.qd, arm.tau)]
    return done.index(True) == audit.size - 1 and sum(done) == 1


@pytest.mark.parametrize('q_scale, tau_scale, words', [
    (1.0, 1.0, None), (1.0, -1.0, 'other sign convention'), (1.0, 1000.0, 'another unit'),
    (np.degrees(1.0), 1.0, 'look like degrees')])
def test_the_audit_judges_the_first_samples_once(q_scale, tau_scale, words):
    audit = StreamAudit(load_urdf(URDF), JOINTS, size=1000)
    assert _feed(audit, _arm(1200), q_scale, tau_scale)
    if words is None:
        assert audit.state == 'passed' and not audit.warnings
    else:
        assert audit.state == 'refused' and words in audit.problem
    learned = StreamAudit(None, JOINTS, size=1000)   # no URDF: q and tau are not judged
    assert _feed(learned, _arm(1200), q_scale, tau_scale) and learned.state == 'passed'


def test_swapped_velocities_are_refused_for_a_urdf_model_and_a_reset_starts_over():
    arm = _arm(1200)
    arm.qd = arm.qd[:, ::-1].copy()
    swapped = StreamAudit(load_urdf(URDF), JOINTS, size=1000)
    _feed(swapped, arm)
    assert swapped.state == 'refused' and 'qd' in swapped.problem
    assert swapped.problem.endswith('set velocity_source: positions to differentiate the '
                                    "positions instead of using the driver's velocity")
    zeros = _arm(1200)
    zeros.qd = np.zeros_like(zeros.qd)   # a driver that fills velocity with zeros
    learned = StreamAudit(None, JOINTS, size=1000)
    _feed(learned, zeros)
    assert learned.state == 'passed' and 'velocity_source: positions' in learned.warnings[-1]
    audit = StreamAudit(load_urdf(URDF), JOINTS, size=1000)
    arm = _arm(1200)
    for t, q, qd, tau in zip(arm.time[:500], arm.q, arm.qd, arm.tau):
        audit.add(t, q, qd, tau)
    assert not audit.add(0.0, arm.q[0], arm.qd[0], arm.tau[0])   # time went back: gather again
    assert audit.state == 'pending' and len(audit._rows) == 1


def _still_then_moving(still: int, moving: int, dt: float = 0.005) -> Trajectory:
    """Return the 2-link arm standing still for `still` samples (gravity torque), then moving."""
    arm = _arm(moving, dt)
    q0 = arm.q[:1]
    gravity = rnea(load_urdf(URDF), *(torch.as_tensor(a) for a in (q0, 0 * q0, 0 * q0)))
    return Trajectory(time=np.arange(still + moving) * dt, joint_names=JOINTS,
                      q=np.concatenate([np.repeat(q0, still, 0), arm.q]),
                      qd=np.concatenate([np.zeros((still, 2)), arm.qd]),
                      tau=np.concatenate([np.repeat(gravity.numpy(), still, 0), arm.tau]))


def test_velocities_are_judged_once_the_joints_move_not_on_a_standstill(
        tmp_path, capsys, monkeypatch):
    """A robot that stands still for the first window: its swapped qd is caught when it moves."""
    arm = _still_then_moving(1000, 1200)
    arm.qd = arm.qd[:, ::-1].copy()
    audit = StreamAudit(load_urdf(URDF), JOINTS, size=1000)
    judged = [audit.add(t, q, qd, tau) for t, q, qd, tau in zip(arm.time, arm.q, arm.qd, arm.tau)]
    assert judged.index(True) == 999 and judged[999 + 1000] and sum(judged) == 2
    assert audit.state == 'refused' and 'qd' in audit.problem and audit.refusals == 1
    assert audit.watching   # the next window is judged in full
    learned = StreamAudit(None, JOINTS, size=1000)
    for t, q, qd, tau in zip(arm.time[:1000], arm.q, arm.qd, arm.tau):
        learned.add(t, q, qd, tau)
    assert learned.state == 'passed' and learned.unmoved == JOINTS and learned.watching
    assert learned.new_warnings() == []
    for t, q, qd, tau in zip(arm.time[1000:], arm.q[1000:], arm.qd[1000:], arm.tau[1000:]):
        learned.add(t, q, qd, tau)
    assert learned.state == 'passed' and not learned.unmoved and not learned.watching
    assert learned.last_judged == JOINTS
    news = learned.new_warnings()
    assert len(news) == 3 and 'velocity_source: positions' in news[-1]
    assert learned.new_warnings() == []   # each said once
    # `rdl replay` judges a bag the same way: its URDF models are skipped, the others run.
    monkeypatch.setattr(replay_cli, 'REPLAY_AUDIT_SAMPLES', 1000)
    bag_io.write_joint_trajectories(tmp_path / 'bag', [arm], 'sqlite3')
    assert cli.main(['replay', str(tmp_path / 'bag'), '--models', 'ffnn,rigid_body',
                     '--urdf', URDF, '--out', str(tmp_path / 'report')]) == 0
    out = capsys.readouterr().out
    assert 'skipped rigid_body: joint_states: recorded joint velocities do not match' in out
    assert 'ffnn' in json.loads((tmp_path / 'report' / 'metrics.json').read_text())['models']


@pytest.mark.ros
def test_dynamics_learner_stops_on_flipped_torques_and_says_why(tmp_path):
    log = tmp_path / 'learner.log'
    arm = _arm(2300, dt=0.002)
    with learner_and_arm(log, {'model': 'rigid_body', 'urdf': URDF},
                         'flipped_arm') as (probe, publisher):
        values = watch_diagnostics(probe, 'dynamics_learner')
        for t, q, qd, tau in zip(arm.time, arm.q, arm.qd, arm.tau):
            publisher.publish(joint_state_msg(10**9 + int(t * 1e9), JOINTS, q, qd, -tau))
            time.sleep(LEARNER_PACE_S)
        assert wait_for(lambda: 'data refused' in log.read_text(), 20), log.read_text()
        assert wait_for(lambda: values.get('data_audit') == 'refused', 5), values
    text = log.read_text()
    assert 'not learning: data refused' in text and 'other sign convention' in text


@pytest.mark.ros
def test_dynamics_learner_judges_velocities_once_the_robot_moves(tmp_path):
    log = tmp_path / 'learner.log'
    arm = _still_then_moving(2300, 2600, dt=0.002)   # to spare for dropped messages
    arm.qd = arm.qd[:, ::-1].copy()
    with learner_and_arm(log, {'model': 'rigid_body', 'urdf': URDF},
                         'still_arm') as (probe, publisher):
        values = watch_diagnostics(probe, 'dynamics_learner')
        for t, q, qd, tau in zip(arm.time, arm.q, arm.qd, arm.tau):
            publisher.publish(joint_state_msg(10**9 + int(t * 1e9), JOINTS, q, qd, tau))
            time.sleep(LEARNER_PACE_S)
        assert wait_for(lambda: 'data refused' in log.read_text(), 20), log.read_text()
        assert wait_for(lambda: values.get('data_audit') == 'refused', 5), values
    text = log.read_text()
    assert "the velocities of ['joint1', 'joint2'] are judged once they move" in text
    assert 'do not match the positions' in text


def test_a_refusal_holds_until_a_later_window_passes_in_full():
    """The arm's first seconds (no controller yet: zero effort) refuse, good data after pass."""
    arm = _arm(3200)
    zero_first = arm.tau.copy()
    zero_first[:1100] = 0.0   # the first window, and the second's first tenth
    audit = StreamAudit(load_urdf(URDF), JOINTS, size=1000)
    states = []
    for t, q, qd, tau in zip(arm.time, arm.q, arm.qd, zero_first):
        if audit.add(t, q, qd, tau):
            states.append(audit.state)
    assert states == ['refused', 'passed'] and audit.refusals == 1
    assert audit.problem is None and not audit.watching and not audit.unmoved
    flipped = StreamAudit(load_urdf(URDF), JOINTS, size=1000)   # wrong throughout: held
    for t, q, qd, tau in zip(arm.time, arm.q, arm.qd, -arm.tau):
        flipped.add(t, q, qd, tau)
    assert flipped.state == 'refused' and flipped.refusals == 3 and flipped.watching


@pytest.mark.ros
def test_dynamics_learner_resumes_learning_when_the_data_pass_after_a_refusal(tmp_path):
    """A learner started before the arm's controller (zero effort) learns once torques come."""
    log = tmp_path / 'learner.log'
    arm = _arm(6200, dt=0.002)
    arm.tau[:2050] = 0.0
    with learner_and_arm(log, {'model': 'rigid_body', 'urdf': URDF},
                         'late_controller') as (probe, publisher):
        values = watch_diagnostics(probe, 'dynamics_learner')
        predictions = watch_predictions(probe)
        for t, q, qd, tau in zip(arm.time, arm.q, arm.qd, arm.tau):
            publisher.publish(joint_state_msg(10**9 + int(t * 1e9), JOINTS, q, qd, tau))
            time.sleep(LEARNER_PACE_S)
        assert wait_for(lambda: 'learning resumes' in log.read_text(), 20), log.read_text()
        assert wait_for(lambda: values.get('data_audit') == 'passed', 5), values
        assert int(values['audit_refused_windows']) >= 1
    text = log.read_text()
    assert text.count('not learning: data refused') == 1 and 'is 0' in text
    # Predicted while the first window was judged, none for the refused window's successor
    # (2000 samples, 4 s of stamps), then again.
    stamps = np.sort([stamp for stamp, _ in predictions]) * 1e-9
    gaps = np.diff(stamps)
    held = int(gaps.argmax())
    assert gaps[held] > 3.0 and len(stamps) - held - 1 > 1000


def test_effort_that_is_zero_everywhere_is_refused_unless_it_is_a_command(tmp_path, capsys):
    arm = _arm(1200)
    for measured, state in ((True, 'refused'), (False, 'passed')):
        audit = StreamAudit(None, JOINTS, size=1000, measured=measured)
        _feed(audit, arm, tau_scale=0.0)
        assert audit.state == state
    refused = StreamAudit(None, JOINTS, size=1000)
    _feed(refused, arm, tau_scale=0.0)
    assert 'does not measure it' in refused.problem
    zero = _arm(1200)
    zero.tau = np.zeros_like(zero.tau)
    config = tmp_path / 'ffnn.yaml'
    config.write_text(CONFIGS['ffnn'])
    assert cli.main(['train', '--config', str(config), '--out', str(tmp_path / 'run'),
                     '--data', _csv(tmp_path / 'zero.csv', zero, 1.0)]) == 2
    assert 'the torque (effort) is 0 for every joint' in capsys.readouterr().err
    # rdl replay says what the node would do, for every model, not only the URDF's.
    bag_io.write_joint_trajectories(tmp_path / 'zero_bag', [zero], 'sqlite3')
    assert cli.main(['replay', str(tmp_path / 'zero_bag'), '--models', 'ffnn',
                     '--out', str(tmp_path / 'report')]) == 2
    assert ('dynamics_learner would not learn from this bag: joint_states: the torque (effort)'
            ' is 0' in capsys.readouterr().err)
    assert not (tmp_path / 'report').exists()
