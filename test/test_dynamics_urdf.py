"""URDF loading: what is read, and clear errors for every kind of bad input."""
from pathlib import Path

import pytest
from robot_dynamics_learning.dynamics import (crba, jacobian, JOINT_PRISMATIC, JOINT_REVOLUTE,
                                              link_pose, load_urdf, rnea, URDFError)
import torch

ROOT = Path(__file__).resolve().parents[1]

GOOD_LINK = ('<link name="{name}"><inertial><origin xyz="0.1 0 0"/><mass value="1.0"/>'
             '<inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/>'
             '</inertial></link>')


def _robot(*parts: str, header: str = '') -> str:
    return f'<?xml version="1.0"?>{header}<robot name="bad">' + ''.join(parts) + '</robot>'


def _joint(name: str, parent: str, child: str, kind: str = 'revolute',
           axis: str = '0 0 1') -> str:
    return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
            f'<child link="{child}"/><axis xyz="{axis}"/>'
            '<limit lower="-1" upper="1" velocity="1" effort="1"/></joint>')


def test_panda_description_is_read():
    model = load_urdf(ROOT / 'urdf' / 'panda.urdf')
    assert model.n_dof == 7
    assert model.joint_names == tuple(f'panda_joint{i}' for i in range(1, 8))
    assert model.parents == (-1, 0, 1, 2, 3, 4, 5)
    assert model.joint_types == (JOINT_REVOLUTE,) * 7
    lower, upper, velocity, effort = model.joint_limits
    assert float(lower[3]) == -3.0718 and float(upper[5]) == 3.7525
    assert float(velocity[6]) == 2.61 and float(effort[0]) == 87.0
    # The flange is merged into link 7's body with its fixed offset.
    assert model.link_bodies[model.link_index('panda_link8')] == 6
    assert abs(float(model.link_masses()[0]) - 4.970684) < 1e-12
    # Zero configuration: flange at x = 0.088, z = 0.333 + 0.316 + 0.384 - 0.107.
    pose = link_pose(model, torch.zeros(7, dtype=torch.float64), 'panda_link8')
    assert torch.allclose(pose[:3, 3], torch.tensor([0.088, 0.0, 0.926], dtype=torch.float64),
                          atol=1e-12)


def test_string_and_file_give_the_same_model():
    path = ROOT / 'urdf' / 'planar_2link.urdf'
    from_file, from_text = load_urdf(path), load_urdf(path.read_text())
    assert from_file.joint_names == from_text.joint_names
    assert torch.equal(from_file.inertias, from_text.inertias)
    assert torch.equal(from_file.damping, torch.tensor([0.1, 0.1], dtype=torch.float64))
    assert torch.equal(from_file.friction, torch.tensor([0.05, 0.05], dtype=torch.float64))


def test_rc_car_description():
    model = load_urdf(ROOT / 'urdf' / 'rc_car.urdf')
    assert model.n_dof == 6
    assert abs(float(model.link_masses().sum()) + 1.40 - 1.58) < 1e-9
    steer = model.joint_index('front_left_steering_joint')
    assert float(model.joint_limits.upper[steer]) == 0.6
    wheel = model.joint_index('rear_left_wheel_joint')
    assert float(model.joint_limits.upper[wheel]) == float('inf')  # continuous
    xml = (ROOT / 'urdf' / 'rc_car.urdf').read_text()
    for plugin in ('JointStatePublisher', 'AckermannSteering', 'PosePublisher'):
        assert f'gz::sim::systems::{plugin}' in xml
    assert '<wheel_base>0.1735</wheel_base>' in xml


def test_prismatic_and_oblique_axes_are_kept():
    xml = _robot('<link name="base"/>', GOOD_LINK.format(name='a'), GOOD_LINK.format(name='b'),
                 _joint('slide', 'base', 'a', 'prismatic', '1 1 0'),
                 _joint('turn', 'a', 'b', 'revolute', '0 2 2'))
    model = load_urdf(xml)
    assert model.joint_types == (JOINT_PRISMATIC, JOINT_REVOLUTE)
    root_half = 0.5 ** 0.5
    assert torch.allclose(model.axes, torch.tensor([[root_half, root_half, 0.0],
                                                    [0.0, root_half, root_half]],
                                                   dtype=torch.float64))
    # Pushing along the slide axis moves the second body along that axis.
    q = torch.tensor([0.3, 0.0], dtype=torch.float64)
    pose = link_pose(model, q, 'b')
    assert torch.allclose(pose[:3, 3], 0.3 * model.axes[0])


@pytest.mark.parametrize('inertial, words', [
    ('', ['link', "'a'", 'missing or zero mass']),
    ('<inertial><mass value="0"/><inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="0"/>'
     '</inertial>', ["'a'", 'missing or zero mass']),
    ('<inertial><mass value="1"/><inertia ixx="1" ixy="2" ixz="0" iyy="1" iyz="0" izz="1"/>'
     '</inertial>', ["'a'", 'not positive definite']),
    ('<inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" '
     'izz="0.5"/></inertial>', ["'a'", 'triangle inequality']),
    ('<inertial><mass value="-1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/>'
     '</inertial>', ["'a'", 'negative mass']),
])
def test_bad_inertials_are_rejected_by_name(inertial, words):
    xml = _robot('<link name="base"/>', f'<link name="a">{inertial}</link>',
                 _joint('j', 'base', 'a'))
    with pytest.raises(URDFError) as error:
        load_urdf(xml)
    for word in words:
        assert word in str(error.value)


def test_massless_fixed_frames_are_fine():
    xml = _robot('<link name="base"/>', GOOD_LINK.format(name='a'), '<link name="tool"/>',
                 _joint('j', 'base', 'a'),
                 '<joint name="f" type="fixed"><parent link="a"/><child link="tool"/></joint>')
    assert load_urdf(xml).link_names == ('base', 'a', 'tool')


def test_cycle_and_closed_chain_are_rejected():
    closed = _robot('<link name="base"/>', GOOD_LINK.format(name='a'),
                    GOOD_LINK.format(name='b'), _joint('j1', 'base', 'a'),
                    _joint('j2', 'a', 'b'), _joint('j3', 'base', 'b'))
    with pytest.raises(URDFError, match="'b' is the child of two joints"):
        load_urdf(closed)
    loop = _robot(GOOD_LINK.format(name='a'), GOOD_LINK.format(name='b'),
                  _joint('j1', 'a', 'b'), _joint('j2', 'b', 'a'))
    with pytest.raises(URDFError, match='cycle'):
        load_urdf(loop)


@pytest.mark.parametrize('kind', ['floating', 'planar', 'ball'])
def test_unsupported_joint_types_are_rejected(kind):
    xml = _robot('<link name="base"/>', GOOD_LINK.format(name='a'),
                 _joint('odd_joint', 'base', 'a', kind))
    with pytest.raises(URDFError, match=f"joint 'odd_joint' has unsupported type '{kind}'"):
        load_urdf(xml)


def test_unknown_links_and_bad_numbers():
    dangling = _robot('<link name="base"/>', GOOD_LINK.format(name='a'),
                      _joint('j', 'base', 'ghost'))
    with pytest.raises(URDFError, match="unknown link 'ghost'"):
        load_urdf(dangling)
    garbage = _robot('<link name="base"/>', GOOD_LINK.format(name='a'),
                     _joint('j', 'base', 'a', axis='0 0 one'))
    with pytest.raises(URDFError):
        load_urdf(garbage)
    zero_axis = _robot('<link name="base"/>', GOOD_LINK.format(name='a'),
                       _joint('j', 'base', 'a', axis='0 0 0'))
    with pytest.raises(URDFError, match="joint 'j' has a zero or invalid axis"):
        load_urdf(zero_axis)
    with pytest.raises(URDFError, match='malformed XML'):
        load_urdf('<robot name="x"><link name="a"></robot>')
    with pytest.raises(FileNotFoundError):
        load_urdf(ROOT / 'urdf' / 'no_such_robot.urdf')


def test_entity_expansion_and_external_entities_are_refused():
    laughs = ('<?xml version="1.0"?><!DOCTYPE robot [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;">'
              '<!ENTITY c "&b;&b;&b;">]><robot name="&c;"><link name="base"/></robot>')
    with pytest.raises(URDFError, match='unsafe XML'):
        load_urdf(laughs)
    external = ('<?xml version="1.0"?><!DOCTYPE robot [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
                '<robot name="&x;"><link name="base"/></robot>')
    with pytest.raises(URDFError, match='unsafe XML'):
        load_urdf(external)


def test_queries_and_tensors_are_checked():
    model = load_urdf(ROOT / 'urdf' / 'planar_2link.urdf')
    q = torch.zeros(3, 2, dtype=torch.float64)
    with pytest.raises(KeyError, match="unknown link 'hand'.*known links: base_link, link1"):
        jacobian(model, q, 'hand')
    with pytest.raises(KeyError, match="unknown joint 'elbow'"):
        model.joint_index('elbow')
    with pytest.raises(ValueError, match=r'q must have shape \(\.\.\., 2\)'):
        crba(model, torch.zeros(3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match='qdd must have shape'):
        rnea(model, q, q, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match='qd has dtype torch.float32'):
        rnea(model, q, q.float(), q)
    with pytest.raises(ValueError, match='do not broadcast'):
        rnea(model, q, torch.zeros(4, 2, dtype=torch.float64), q)
    with pytest.raises(TypeError, match='floating-point'):
        crba(model, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match='external_wrench'):
        rnea(model, q, q, q, external_wrench=torch.zeros(3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="frame must be 'world' or 'local'"):
        jacobian(model, q, 'tip', frame='body')
