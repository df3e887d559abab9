"""
Property-based fuzzing (hypothesis) of every subscriber parser and every file loader.

Parsers (data/messages.py, re-exported by nodes/conversions.py): arbitrary message-like
objects never raise, every accepted value is finite, and every call is counted (accepted or
under a reason). Loaders (URDF, track YAML, training config YAML, checkpoint, bag metadata):
arbitrary files either load into finite values or are refused with a ValueError naming the
file or the field; nothing else escapes. Budgeted to run in well under two minutes in CI.
"""
import io
import itertools
import math
from pathlib import Path
import shutil
from types import SimpleNamespace

from hypothesis import given, HealthCheck, settings
from hypothesis import strategies as st
import numpy as np
import pytest
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.data.messages import (ArrayParser, CarCommandParser,
                                                   JointStateParser, PoseParser, StampBounds)
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.learning.checkpoint import (checkpoint_payload, load_checkpoint,
                                                         tensor_checksum)
from robot_dynamics_learning.learning.cli import load_config
from robot_dynamics_learning.models.registry import build_model, MODEL_TYPES
import torch
import yaml

FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])
FILES = settings(FUZZ, max_examples=60)

NUMBERS = st.one_of(st.floats(), st.integers(-2 ** 70, 2 ** 70), st.sampled_from(
    [0, 1, -1, 0.5, 1e-300, 1e300, float('nan'), float('inf'), -float('inf')]))
ANY = st.one_of(NUMBERS, st.none(), st.booleans(), st.text(max_size=4),
                st.lists(NUMBERS, max_size=3))


def _finite(values) -> bool:
    return bool(np.isfinite(np.asarray(values, dtype=np.float64)).all())


# ---- subscriber parsers ---------------------------------------------------------------------

def _stamp():
    return st.builds(SimpleNamespace, sec=st.one_of(st.integers(-2 ** 40, 2 ** 40), ANY),
                     nanosec=st.one_of(st.integers(0, 10 ** 9), ANY))


def _header():
    return st.builds(SimpleNamespace, stamp=_stamp(), frame_id=st.text(max_size=3))


def _array():
    return st.one_of(st.lists(NUMBERS, max_size=6), ANY,
                     st.lists(st.lists(NUMBERS, max_size=2), max_size=2))


# Near-valid messages (plausible stamps, two joints, finite values) reach the accepting path;
# each field can still be replaced by anything.
GOOD_HEADER = st.builds(SimpleNamespace, stamp=st.builds(
    SimpleNamespace, sec=st.integers(1, 10 ** 9), nanosec=st.integers(0, 10 ** 9 - 1)),
    frame_id=st.just('w'))
PAIR = st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2)
JOINT_STATES = st.one_of(
    st.builds(SimpleNamespace, header=st.one_of(GOOD_HEADER, _header()),
              name=st.sampled_from([['a', 'b'], ['b', 'a'], ['a', 'b', 'c'], ['a', 'a']]),
              position=st.one_of(PAIR, _array()), velocity=st.one_of(PAIR, _array()),
              effort=st.one_of(PAIR, _array())),
    st.builds(SimpleNamespace, header=st.one_of(_header(), ANY),
              name=st.one_of(st.lists(st.sampled_from(['a', 'b', 'c']), max_size=5), ANY),
              position=_array(), velocity=_array(), effort=_array()))


def _check_counted(parser, calls: int) -> None:
    assert parser.counter.accepted + parser.counter.total_rejected == calls


@FUZZ
@given(st.lists(JOINT_STATES, min_size=1, max_size=5), st.sampled_from([None, ['a', 'b']]))
def test_fuzz_joint_state_parser(messages, names):
    parser = JointStateParser(names, bounds=StampBounds(clock=lambda: 10 ** 18,
                                                        max_future_ns=10 ** 9,
                                                        reset_after_ns=10 ** 9))
    for msg in messages:
        result = parser.parse(msg)
        if result.ok:
            sample = result.value
            assert sample.stamp_ns > 0
            for values in (sample.position, sample.velocity, sample.effort):
                assert values is None or (values.shape == (len(parser.joint_names),)
                                          and _finite(values))
            assert sample.position is not None
        else:
            assert result.reason is not None and result.detail
    _check_counted(parser, len(messages))


POINT = st.one_of(st.builds(SimpleNamespace, x=st.floats(-1e3, 1e3), y=st.floats(-1e3, 1e3),
                            z=st.floats(-1e3, 1e3)),
                  st.builds(SimpleNamespace, x=ANY, y=ANY, z=ANY))
QUATERNION = st.one_of(st.builds(SimpleNamespace, x=ANY, y=ANY, z=ANY, w=ANY),
                       st.just(SimpleNamespace(x=0.0, y=0.0, z=0.0, w=1.0)))
POSES = st.builds(SimpleNamespace, header=st.one_of(GOOD_HEADER, _header()),
                  pose=st.builds(SimpleNamespace, position=POINT, orientation=QUATERNION))


@FUZZ
@given(st.lists(POSES, min_size=1, max_size=5))
def test_fuzz_pose_parser(messages):
    parser = PoseParser(bounds=StampBounds(clock=lambda: 10 ** 18, max_future_ns=10 ** 9))
    for msg in messages:
        result = parser.parse(msg)
        if result.ok:
            pose = result.value
            assert _finite(pose.position) and _finite(pose.quaternion)
            assert math.isfinite(pose.yaw)
            assert abs(np.linalg.norm(pose.quaternion) - 1.0) <= 1e-2
    _check_counted(parser, len(messages))


VECTOR = st.builds(SimpleNamespace, x=ANY, y=ANY, z=ANY)
TWIST = st.builds(SimpleNamespace, linear=VECTOR, angular=VECTOR)
COMMANDS = st.one_of(TWIST, st.builds(SimpleNamespace, header=_header(), twist=TWIST),
                     st.builds(SimpleNamespace, header=_header(), axes=_array()))


@FUZZ
@given(st.lists(COMMANDS, min_size=1, max_size=5))
def test_fuzz_car_command_parser(messages):
    parser = CarCommandParser()
    for msg in messages:
        result = parser.parse(msg)
        if result.ok:
            assert math.isfinite(result.value.throttle)
            assert math.isfinite(result.value.steering)
    _check_counted(parser, len(messages))


ARRAYS = st.builds(SimpleNamespace, layout=st.builds(SimpleNamespace, data_offset=ANY),
                   data=_array())


@FUZZ
@given(st.lists(ARRAYS, min_size=1, max_size=5), st.sampled_from([None, 2]))
def test_fuzz_array_parser(messages, size):
    parser = ArrayParser(size)
    for msg in messages:
        result = parser.parse(msg)
        if result.ok:
            assert result.value.ndim == 1 and _finite(result.value)
            assert size is None or result.value.size == size
    _check_counted(parser, len(messages))


# ---- file loaders ---------------------------------------------------------------------------

URDF_NUMBER = st.one_of(st.sampled_from(['0', '1', '-1', '0.1', 'nan', 'inf', '-inf', '1e308',
                                         '1e-320', '', 'x', '0 0']),
                        st.floats().map(repr))


@st.composite
def urdfs(draw) -> str:
    """Draw a two-joint URDF with up to three of its numbers from URDF_NUMBER."""
    bad = draw(st.sets(st.integers(0, 50), max_size=3))
    index = itertools.count()

    def num(valid: str) -> str:
        return draw(URDF_NUMBER) if next(index) in bad else valid

    def link(name: str) -> str:
        return (f'<link name="{name}"><inertial><origin xyz="{num("0.1")} 0 {num("0")}" '
                f'rpy="0 {num("0")} 0"/><mass value="{num("1")}"/><inertia ixx="{num("0.01")}"'
                f' ixy="{num("0")}" ixz="0" iyy="{num("0.01")}" iyz="0" izz="{num("0.01")}"/>'
                '</inertial></link>')

    def joint(name: str, parent: str, child: str) -> str:
        kind = draw(st.sampled_from(['revolute', 'prismatic', 'continuous', 'revolute',
                                     'fixed', 'planar']))
        return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
                f'<child link="{child}"/><origin xyz="{num("0")} 0 {num("0.1")}" '
                f'rpy="{num("0")} 0 0"/><axis xyz="{num("0")} 0 {num("1")}"/>'
                f'<limit lower="{num("-1")}" upper="{num("1")}" velocity="{num("1")}" '
                f'effort="{num("1")}"/><dynamics damping="{num("0")}" '
                f'friction="{num("0")}"/></joint>')
    base = draw(st.sampled_from(['<link name="base"/>', link('base')]))
    return ('<?xml version="1.0"?><robot name="fuzz">' + base + link('a') + link('b')
            + joint('j1', 'base', 'a') + joint('j2', 'a', 'b') + '</robot>')


@FUZZ
@given(st.one_of(urdfs(), st.text(max_size=200).map(lambda text: '<' + text),
                 st.binary(max_size=200)))
def test_fuzz_urdf_loader(xml):
    try:
        model = load_urdf(xml)
    except ValueError as error:
        assert str(error)
        return
    for tensor in (model.axes, model.placements, model.inertias, model.damping,
                   model.friction, model.link_offsets):
        assert torch.isfinite(tensor).all()
    for tensor in model.joint_limits:
        assert not torch.isnan(tensor).any()


TRACKS = st.fixed_dictionaries(
    {'half_width': ANY},
    optional={'spacing': ANY, 'name': ANY,
              'waypoints': st.one_of(ANY, st.lists(st.lists(NUMBERS, max_size=3), max_size=6)),
              'stadium': st.one_of(ANY, st.fixed_dictionaries({'straight': ANY,
                                                               'radius': ANY}))})


@FILES
@given(st.one_of(TRACKS.map(yaml.safe_dump), st.text(max_size=80)))
def test_fuzz_track_loader(tmp_path, text):
    path = tmp_path / 'track.yaml'
    path.write_text(text)
    try:
        spec = load_track_spec(path)
    except ValueError as error:
        assert str(path) in str(error)
        return
    assert math.isfinite(spec.half_width) and spec.half_width > 0
    assert _finite(spec.waypoints)
    track = Track(spec)
    assert _finite(track.points) and _finite(track.tangents) and math.isfinite(track.length)


CONFIGS = st.fixed_dictionaries(
    {'model_type': st.one_of(st.sampled_from(['lstm', 'ffnn', 'gru']), ANY)},
    optional={'model': st.one_of(ANY, st.dictionaries(st.sampled_from(
                  ['hidden_size', 'num_layers', 'dropout', 'bogus']), ANY, max_size=3)),
              'training': st.one_of(ANY, st.dictionaries(st.sampled_from(
                  ['learning_rate', 'batch_size', 'max_epochs', 'grad_clip', 'obs_drop']),
                  ANY, max_size=3)),
              'data': st.one_of(ANY, st.dictionaries(st.sampled_from(
                  ['window', 'stride', 'val_fraction', 'acc_window_s', 'problem']), ANY,
                  max_size=3))})


def _numbers_of(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers_of(item)
    elif isinstance(value, float):
        yield value


@FILES
@given(st.one_of(CONFIGS.map(yaml.safe_dump), st.text(max_size=80)))
def test_fuzz_training_config_loader(tmp_path, text):
    path = tmp_path / 'train.yaml'
    path.write_text(text)
    try:
        config = load_config(path)
    except ValueError as error:
        assert str(path) in str(error)
        return
    assert config['model_type'] in MODEL_TYPES
    assert all(math.isfinite(v) for v in _numbers_of(config))


@pytest.fixture(scope='module')
def payload():
    return checkpoint_payload(build_model('lstm', {'hidden_size': 3}, 6, 2, 2), ['a', 'b'])


FIELDS = ['format_version', 'model_type', 'config', 'dims', 'convention',
          'joint_names', 'metadata', 'state_dict', 'checksum']
TENSORS = st.builds(lambda shape, fill: torch.full(shape, fill),
                    st.lists(st.integers(0, 4), max_size=3).map(tuple),
                    st.sampled_from([0.0, 1.0, float('nan'), float('inf')]))


@st.composite
def edits(draw):
    """One change to a valid payload, and whether the checksum is then recomputed."""
    kind = draw(st.sampled_from(['drop', 'replace', 'dims', 'config', 'tensor', 'metadata']))
    key = draw(st.sampled_from(FIELDS))
    return kind, key, draw(ANY), draw(TENSORS), draw(st.booleans())


@FILES
@given(st.lists(edits(), max_size=3), st.booleans())
def test_fuzz_checkpoint_loader(tmp_path, payload, changes, garbage):
    path = tmp_path / 'm.pt'
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in payload.items()}
    for kind, key, value, tensor, rehash in changes:
        if kind == 'drop':
            data.pop(key, None)
        elif kind == 'replace':
            data[key] = value
        elif kind in ('dims', 'config', 'metadata') and isinstance(data.get(kind), dict):
            inner = {'dims': 'n_obs', 'config': 'hidden_size', 'metadata': 'steps'}[kind]
            data[kind][inner] = value
        elif kind == 'tensor' and isinstance(data.get('state_dict'), dict):
            name = sorted(data['state_dict'])[len(str(value)) % len(data['state_dict'])]
            data['state_dict'][name] = tensor
        if rehash and isinstance(data.get('state_dict'), dict):
            try:
                data['checksum'] = tensor_checksum(data['state_dict'])
            except (AttributeError, TypeError):
                pass
    buffer = io.BytesIO()
    torch.save(data, buffer)
    raw = buffer.getvalue()
    path.write_bytes(raw[:len(raw) // 2] if garbage else raw)
    try:
        loaded = load_checkpoint(path)
    except ValueError as error:
        assert str(path) in str(error)
        return
    assert all(torch.isfinite(v).all() for v in loaded.model.state_dict().values())


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    t = np.arange(50) * 0.01
    bag = tmp_path_factory.mktemp('bag') / 'bag'
    bag_io.write_joint_trajectories(bag, [Trajectory(time=t, joint_names=['a'],
                                                     q=np.sin(t)[:, None], tau=t[:, None])],
                                    'mcap')
    return bag


@st.composite
def metadata(draw, original: str) -> str:
    """Draw the bag's metadata.yaml with counts changed, fields removed or junk."""
    data = yaml.safe_load(original)
    info = data['rosbag2_bagfile_information']
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(['message_count', 'topics_with_message_count',
                                      'version', 'storage_identifier', 'relative_file_paths',
                                      'duration', 'starting_time', 'files']))
        action = draw(st.sampled_from(['drop', 'junk', 'count']))
        if action == 'drop':
            info.pop(field, None)
        elif action == 'junk':
            info[field] = draw(ANY)
        else:
            count = draw(st.one_of(st.integers(-10, 10 ** 12), ANY))
            info['message_count'] = count
            for topic in info.get('topics_with_message_count') or []:
                if isinstance(topic, dict):
                    topic['message_count'] = count
    return yaml.safe_dump(data) if draw(st.booleans()) else draw(st.text(max_size=60))


@FILES
@given(st.data())
def test_fuzz_bag_metadata(tmp_path, small_bag, data):
    bag = tmp_path / 'bag'
    if bag.exists():
        shutil.rmtree(bag)
    shutil.copytree(small_bag, bag)
    meta = Path(bag) / 'metadata.yaml'
    meta.write_text(data.draw(metadata((small_bag / 'metadata.yaml').read_text())))
    try:
        arrays = bag_io.read_topic(bag, '/joint_states')
    except (ValueError, FileNotFoundError) as error:
        assert str(error)
        return
    assert arrays.fields['position'].shape == (50, 1)
    assert _finite(arrays.fields['position'])
