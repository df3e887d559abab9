"""
Issue 17 regressions without ROS: URDFs, identification, parsers, bags, car settings.

URDF numbers, identification memory and output, parser cost, stamp bounds and resets, bag
metadata counts, car command scales and track files.

Checkpoints are in test_hardening_checkpoint.py, the nodes in test_hardening_nodes.py.
"""
import json
from pathlib import Path
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from robot_dynamics_learning import cli
from robot_dynamics_learning.control.track import load_track_spec
from robot_dynamics_learning.data import bag_io, datasets
from robot_dynamics_learning.data.messages import (CommandMapping, JointStateParser, PoseParser,
                                                   Reason, RELOCK_AFTER, StampBounds)
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import load_urdf, rnea, URDFError
from robot_dynamics_learning.learning.replay import StreamRecorder
from robot_dynamics_learning.signals.yaw_filter import CommandedEstimator
import torch

ROOT = Path(__file__).resolve().parents[1]
LINK = ('<link name="{name}"><inertial><origin xyz="0.1 0 0"/><mass value="1.0"/>'
        '<inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>')
S = 1_000_000_000


def _urdf(base: str = '<link name="base"/>', origin: str = '0 0 0.1', extra: str = '') -> str:
    return ('<?xml version="1.0"?><robot name="r">' + base + LINK.format(name='a')
            + f'<joint name="j" type="revolute"><parent link="base"/><child link="a"/>'
            f'<origin xyz="{origin}"/><axis xyz="0 0 1"/>'
            f'<limit lower="-1" upper="1" velocity="1" effort="1"/>{extra}</joint></robot>')


@pytest.mark.parametrize('origin, extra, words', [
    ('nan 0 0.1', '', ["joint 'j'", 'non-finite origin']),
    ('0 inf 0.1', '', ["joint 'j'", 'non-finite origin']),
    ('0 0 0.1', '<dynamics damping="nan"/>', ["joint 'j'", 'non-finite damping']),
])
def test_f02_non_finite_urdf_numbers_are_refused_by_name(origin, extra, words):
    with pytest.raises(URDFError) as error:
        load_urdf(_urdf(origin=origin, extra=extra))
    assert all(word in str(error.value) for word in words), str(error.value)


def test_f02_non_finite_inertial_origin_is_refused():
    xml = _urdf().replace('<origin xyz="0.1 0 0"/>', '<origin xyz="0.1 nan 0"/>')
    with pytest.raises(URDFError, match="link 'a' has a non-finite inertial"):
        load_urdf(xml)


def test_f02_rdl_identify_refuses_a_nan_urdf_and_writes_no_file(tmp_path, capsys):
    urdf = tmp_path / 'nan.urdf'
    urdf.write_text(_urdf(origin='nan 0 0.1'))
    data = tmp_path / 'd.npz'
    rng = np.random.default_rng(0)
    np.savez(data, q=rng.normal(size=(50, 1)), qd=rng.normal(size=(50, 1)),
             qdd=rng.normal(size=(50, 1)), tau=rng.normal(size=(50, 1)))
    out = tmp_path / 'out.json'
    assert cli.main(['identify', str(data), '--urdf', str(urdf), '--out', str(out)]) == 2
    assert 'non-finite origin' in capsys.readouterr().err
    assert not out.exists()


def test_f14_fixed_base_with_zero_mass_and_inertia_loads_like_no_inertial():
    base = ('<link name="base"><inertial><mass value="0"/><inertia ixx="0.1" ixy="0" ixz="0" '
            'iyy="0.1" iyz="0" izz="0.1"/></inertial></link>')
    with_base, plain = load_urdf(_urdf(base=base)), load_urdf(_urdf())
    q = torch.tensor([[0.3]], dtype=torch.float64)
    assert torch.equal(rnea(with_base, q, q, q), rnea(plain, q, q, q))
    # A moving link with that inertial is still refused: it enters the dynamics.
    moving = _urdf().replace(LINK.format(name='a'), base.replace('base', 'a'))
    with pytest.raises(URDFError, match='missing or zero mass|zero mass but non-zero'):
        load_urdf(moving)


def _chain_urdf(n: int) -> str:
    parts = ['<?xml version="1.0"?><robot name="chain"><link name="l0"/>']
    for i in range(1, n + 1):
        parts.append(LINK.format(name=f'l{i}'))
        parts.append(f'<joint name="j{i}" type="revolute"><parent link="l{i - 1}"/>'
                     f'<child link="l{i}"/><origin xyz="0 0 0.05"/><axis xyz="0 1 0"/>'
                     '<limit lower="-1" upper="1" velocity="1" effort="1"/></joint>')
    return ''.join(parts) + '</robot>'


def test_f10_identify_memory_is_bounded_for_a_long_chain(tmp_path):
    # 100 links, 400 samples: the per-sample (n, 10 n) regressor used to be formed with a
    # 6x larger product over all of a 2000-sample chunk (about 2.5 GB here, 9 GB at 200).
    (tmp_path / 'chain.urdf').write_text(_chain_urdf(100))
    script = (
        'import resource, sys, numpy as np\n'
        'from robot_dynamics_learning.dynamics import load_urdf\n'
        'from robot_dynamics_learning.dynamics.identify import identify\n'
        'model = load_urdf(sys.argv[1])\n'
        'rng = np.random.default_rng(0)\n'
        'x = [rng.normal(size=(400, 100)) for _ in range(4)]\n'
        'before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n'
        'identify(model, *x, max_iter=1)\n'
        'print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n')
    done = subprocess.run([sys.executable, '-c', script, str(tmp_path / 'chain.urdf')],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    before_kb, peak_kb = (int(v) for v in done.stdout.split())
    assert (peak_kb - before_kb) * 1024 < 600 * 2 ** 20, (before_kb, peak_kb)


def _joint_msg(stamp_ns: int, names, position=None):
    n = len(names)
    position = np.zeros(n) if position is None else position
    sec, nanosec = divmod(stamp_ns, S)
    return SimpleNamespace(header=SimpleNamespace(stamp=SimpleNamespace(sec=sec,
                                                                        nanosec=nanosec)),
                           name=list(names), position=position, velocity=np.zeros(n),
                           effort=np.zeros(n))


def test_f07_duplicate_check_is_linear_in_the_names():
    names = [f'j{i}' for i in range(10_000)] + ['j5']
    parser = JointStateParser(['j1', 'j2'])
    start = time.perf_counter()
    result = parser.parse(_joint_msg(S, names))
    assert result.reason == Reason.DUPLICATE_JOINT and "'j5'" in result.detail
    assert time.perf_counter() - start < 0.2   # 6.8 s with the quadratic check


def test_f08_rejected_messages_never_reset_and_a_negative_stamp_is_refused():
    parser = JointStateParser(['a'], bounds=StampBounds(reset_after_ns=S // 2))
    assert parser.parse(_joint_msg(10 * S, ['a'])).ok
    assert parser.parse(_joint_msg(0, ['a'])).reason == Reason.ZERO_STAMP
    old_nan = parser.parse(_joint_msg(S, ['a'], np.array([np.nan])))
    assert old_nan.reason == Reason.NON_FINITE
    after = parser.parse(_joint_msg(10 * S + 1000, ['a']))
    assert after.ok and not after.value.time_reset   # the bad ones changed nothing
    negative = parser.parse(_joint_msg(-5 * S, ['a']))
    assert negative.reason == Reason.NEGATIVE_STAMP
    assert parser.stamps.last_ns == 10 * S + 1000
    looped = parser.parse(_joint_msg(S, ['a']))   # a valid message far back: a reset
    assert looped.ok and looped.value.time_reset
    assert parser.counter.rejected == {Reason.ZERO_STAMP: 1, Reason.NON_FINITE: 1,
                                       Reason.NEGATIVE_STAMP: 1}


def test_a_lone_stamp_far_ahead_costs_ten_messages_not_the_rest_of_the_stream():
    # Recorded data has no clock to refuse it: before, every later message was "backwards".
    parser = JointStateParser(['a'], bounds=StampBounds(relock_after=RELOCK_AFTER))
    stamps = [S + k * S // 100 for k in range(40)]
    stamps[5] = 1000 * S
    results = [parser.parse(_joint_msg(t, ['a'])) for t in stamps]
    rejected = [k for k, r in enumerate(results) if not r.ok]
    assert rejected == list(range(6, 6 + RELOCK_AFTER - 1))
    relocked = results[6 + RELOCK_AFTER - 1]
    assert relocked.ok and relocked.value.time_reset   # consumers restart their state
    assert all(r.ok and not r.value.time_reset for r in results[6 + RELOCK_AFTER:])


def test_replay_relocks_after_a_lone_stamp_far_ahead_and_marks_the_reset():
    recorder = StreamRecorder(['a'], time_reset_s=0.5)
    stamps = [S + k * S // 100 for k in range(40)]
    stamps[5] = stamps[4] + S * 3 // 10   # ahead by less than time_reset_s
    for k, stamp in enumerate(stamps):
        recorder.add(_joint_msg(stamp, ['a']), stamp)
    assert len(recorder.rows) == 40 - (RELOCK_AFTER - 1)
    assert recorder.resets == [6]   # the stream restarts at the relocked message


def test_backwards_stamps_that_do_not_move_forward_never_relock():
    parser = JointStateParser(['a'], bounds=StampBounds(relock_after=RELOCK_AFTER))
    assert parser.parse(_joint_msg(100 * S, ['a'])).ok
    for k in range(3 * RELOCK_AFTER):   # stale messages from two sources, interleaved
        assert not parser.parse(_joint_msg((1 + k % 2) * S, ['a'])).ok
    assert parser.stamps.last_ns == 100 * S


def test_stamps_one_float_second_cannot_tell_apart_are_repeated():
    parser = JointStateParser(['a'])
    start = 1_764_000_000 * S   # today's epoch: a float second resolves about 0.24 us
    assert parser.parse(_joint_msg(start, ['a'])).ok
    assert parser.parse(_joint_msg(start + 1, ['a'])).reason == Reason.STAMP_REPEATED
    assert parser.parse(_joint_msg(start + 1000, ['a'])).ok


def test_a_looping_pose_stream_restarts_the_car_estimator():
    parser = PoseParser(bounds=StampBounds(reset_after_ns=S // 2))
    estimator = CommandedEstimator()
    resets = 0
    for _ in range(2):   # a 1 s bag plays twice
        for k in range(100):
            sample = parser.parse(_pose_msg(S + k * S // 100)).value
            if sample.time_reset:
                resets += 1
                estimator.reset()
            assert estimator.update_command(sample.stamp_ns * 1e-9, 0.5, 0.1) is None
            assert estimator.update(sample.stamp_ns * 1e-9, 0.01 * k, 0.0, 0.0) is None
    assert resets == 1 and estimator.estimate() is not None
    assert estimator.counters['rejected_out_of_order'] == 0


def test_a_car_csv_row_stamped_far_ahead_costs_that_row_only(tmp_path):
    rows = [[0.01 * k, 0.01 * k, 0.0, 0.0, 0.3, 0.0, 1.0] for k in range(1, 301)]
    rows[100][0] = 1000.0
    path = tmp_path / 'run.csv'
    path.write_text(','.join(datasets.RC_CAR_COLUMNS) + '\n'
                    + '\n'.join(','.join(str(v) for v in row) for row in rows) + '\n')
    trajectory = datasets.load_rc_car(path)
    assert len(trajectory) == 299
    assert np.all(np.diff(trajectory.time) > 0)


def _pose_msg(stamp_ns: int):
    sec, nanosec = divmod(stamp_ns, S)
    return SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nanosec), frame_id='w'),
        pose=SimpleNamespace(position=SimpleNamespace(x=0.0, y=0.0, z=0.0),
                             orientation=SimpleNamespace(x=0.0, y=0.0, z=0.0, w=1.0)))


@pytest.mark.parametrize('ahead_s', [30.0, 2 ** 31 - 1 - 100])
def test_f04_a_future_stamp_is_refused_and_does_not_blind_the_parser(ahead_s):
    now = [100 * S]
    parser = PoseParser(bounds=StampBounds(clock=lambda: now[0], max_future_ns=S // 2))
    assert parser.parse(_pose_msg(now[0])).ok
    future = parser.parse(_pose_msg(now[0] + int(ahead_s * S)))
    assert future.reason == Reason.FUTURE_STAMP
    for _ in range(5):
        now[0] += S // 100
        assert parser.parse(_pose_msg(now[0])).ok


def test_f04_an_old_stamp_is_refused_when_bounded():
    parser = PoseParser(bounds=StampBounds(clock=lambda: 100 * S, max_age_ns=S))
    assert parser.parse(_pose_msg(98 * S)).reason == Reason.OLD_STAMP
    assert parser.parse(_pose_msg(100 * S)).ok


@pytest.mark.parametrize('count', [10, 10 ** 11])
def test_f09_bag_export_does_not_trust_metadata_counts(tmp_path, count):
    t = np.arange(300) * 0.01
    trajectory = Trajectory(time=t, joint_names=['a'], q=np.sin(t)[:, None],
                            qd=np.cos(t)[:, None], tau=t[:, None])
    bag = tmp_path / 'bag'
    bag_io.write_joint_trajectories(bag, [trajectory], 'mcap')
    meta = bag / 'metadata.yaml'
    meta.write_text(re.sub(r'message_count: \d+', f'message_count: {count}', meta.read_text()))
    out = tmp_path / 'out.npz'
    assert cli.main(['bag', 'export', str(bag), '--topic', '/joint_states',
                     '--out', str(out)]) == 0
    with np.load(out) as data:
        assert data['position'].shape == (300, 1)
        assert np.array_equal(data['position'][:, 0], np.sin(t))


@pytest.mark.parametrize('scale', [1e-300, 1e300, float('nan'), 0.0])
def test_f11_command_scales_are_bounded(scale):
    with pytest.raises(ValueError, match='throttle_scale'):
        CommandMapping(throttle_scale=scale)


@pytest.mark.parametrize('field, value', [('half_width', '.inf'), ('half_width', '.nan'),
                                          ('spacing', '1.0e-300'), ('spacing', '-.inf')])
def test_f11_track_numbers_must_be_finite_and_in_range(tmp_path, field, value):
    path = tmp_path / 'track.yaml'
    values = {'half_width': '0.5', 'spacing': '0.05', field: value}
    path.write_text(f'half_width: {values["half_width"]}\nspacing: {values["spacing"]}\n'
                    'stadium: {straight: 2.0, radius: 1.0}\n')
    with pytest.raises(ValueError) as error:
        load_track_spec(path)
    assert str(path) in str(error.value) and field in str(error.value)


def test_f11_track_waypoints_must_be_finite(tmp_path):
    path = tmp_path / 'track.yaml'
    path.write_text('half_width: 0.5\nwaypoints: [[0, 0], [1, 0], [1, .nan], [0, 1]]\n')
    with pytest.raises(ValueError, match='waypoints must be finite'):
        load_track_spec(path)
    assert json.loads(json.dumps(load_track_spec(ROOT / 'config' / 'tracks' / 'oval.yaml')
                                 .waypoints))
