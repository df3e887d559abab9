"""MuJoCo arm core: independent physics agrees with our RNEA, the command contract holds."""
import numpy as np
import pytest
from robot_dynamics_learning.dynamics import load_urdf, rnea
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.sim.arm import urdf_with_payload
from robot_dynamics_learning.sim.mujoco_arm import MujocoArm, MujocoArmConfig
import torch

Q = np.array([0.3, -0.5, 0.2, -2.0, 0.4, 1.5, 0.3])
QD = np.array([0.5, -0.3, 0.2, 0.4, -0.6, 0.3, 1.0])
FRICTIONLESS = {'friction': (0.0,) * 7, 'damping': (0.0,) * 7, 'armature': (0.0,) * 7}


def urdf_bias(urdf_text: str, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
    tensors = (torch.tensor(v)[None] for v in (q, qd, np.zeros(7)))
    return rnea(load_urdf(urdf_text), *tensors).numpy()[0]


def mujoco_bias(arm: MujocoArm, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
    import mujoco
    arm.data.qpos[:], arm.data.qvel[:] = q, qd
    mujoco.mj_forward(arm.model, arm.data)
    return arm.data.qfrc_bias.copy()


def test_loads_the_urdf_with_its_joints_and_effort_limits():
    arm = MujocoArm()
    assert arm.joint_names == list(load_urdf(resource('urdf/panda.urdf')).joint_names)
    np.testing.assert_array_equal(arm.effort_limit, [87, 87, 87, 87, 12, 12, 12])
    config = MujocoArmConfig()
    np.testing.assert_array_equal(arm.model.dof_frictionloss, config.friction)
    np.testing.assert_array_equal(arm.model.dof_armature, config.armature)
    assert arm.flange == 'panda_link8'


def test_bias_forces_equal_our_rnea_with_and_without_payload():
    """Same inertias read by two parsers: MuJoCo's C + h equals the package's RNEA."""
    arm = MujocoArm(MujocoArmConfig(**FRICTIONLESS))
    text = resource('urdf/panda.urdf').read_text()
    np.testing.assert_allclose(mujoco_bias(arm, Q, QD), urdf_bias(text, Q, QD), atol=1e-8)
    arm.set_payload(2.0, (0.0, 0.01, 0.05))
    loaded = urdf_with_payload(text, 2.0, (0.0, 0.01, 0.05), 'panda_link8')
    np.testing.assert_allclose(mujoco_bias(arm, Q, QD), urdf_bias(loaded, Q, QD), atol=1e-8)
    assert arm.payload == (2.0, (0.0, 0.01, 0.05))
    with pytest.raises(ValueError, match='payload mass'):
        arm.set_payload(-1.0)


def test_commands_are_clipped_refused_and_counted():
    arm = MujocoArm()
    assert arm.command(np.array([100.0, -100.0, 1.0, 0.0, 20.0, 0.0, 0.0]))
    arm.step()
    np.testing.assert_array_equal(arm.applied, [87, -87, 1, 0, 12, 0, 0])
    assert not arm.command(np.array([np.nan] + [0.0] * 6))
    assert not arm.command(np.zeros(6))
    arm.step()
    np.testing.assert_array_equal(arm.applied, [87, -87, 1, 0, 12, 0, 0])   # previous held
    assert {k: arm.counts[k] for k in ('commands', 'clipped', 'rejected_non_finite',
                                       'rejected_size', 'steps')} == {
        'commands': 1, 'clipped': 1, 'rejected_non_finite': 1, 'rejected_size': 1, 'steps': 2}


@pytest.mark.parametrize('action', ['zero', 'damping'])
def test_an_expired_command_gives_way_to_the_timeout_action(action):
    arm = MujocoArm(MujocoArmConfig(command_timeout_s=0.01, timeout_action=action,
                                    brake_damping=5.0))
    arm.reset(Q, QD)
    arm.command(np.full(7, 3.0))
    for _ in range(10):
        arm.step()
    np.testing.assert_array_equal(arm.applied, np.full(7, 3.0))
    for _ in range(5):
        arm.step()
    expected = np.zeros(7) if action == 'zero' else -5.0 * arm.data.qvel
    assert np.abs(expected).max() > 0.1 or action == 'zero'   # still moving: a real brake
    np.testing.assert_allclose(arm.step().effort, np.clip(expected, -12, 12), atol=1e-9)
    assert arm.counts['timeouts'] == 1 and arm.counts['timeout_steps'] >= 5
    arm.command(np.zeros(7))
    assert arm.step().effort.tolist() == [0.0] * 7 and arm.counts['timeouts'] == 1


def test_world_differs_from_the_urdf_and_the_payload_changes_it():
    """Gravity compensation from the URDF holds the frictionless arm; a payload makes it sag."""
    text = resource('urdf/panda.urdf').read_text()
    hold = urdf_bias(text, Q, np.zeros(7))

    def drift(payload: float) -> float:
        arm = MujocoArm(MujocoArmConfig(**FRICTIONLESS, command_timeout_s=1.0))
        arm.reset(Q)
        arm.set_payload(payload)
        for _ in range(200):
            arm.command(hold)
            state = arm.step()
        return float(np.abs(state.position - Q).max())

    assert drift(0.0) < 1e-6
    assert drift(2.0) > 1e-2
    with pytest.raises(ValueError, match='friction has 3 entries'):
        MujocoArm(MujocoArmConfig(friction=(0.1, 0.1, 0.1)))
    with pytest.raises(ValueError, match='initial position needs 7 values'):
        MujocoArm().reset(np.zeros(3))
    with pytest.raises(ValueError, match='timeout_action'):
        MujocoArmConfig(timeout_action='coast')
