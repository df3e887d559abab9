"""Arm simulator: agrees with ABA, tracks, payload and friction act as physics says."""
import numpy as np
import pytest
from robot_dynamics_learning.dynamics import load_urdf, rnea
from robot_dynamics_learning.sim.arm import (ArmConfig, ArmSimulator, find_urdf,
                                             urdf_with_payload)
from robot_dynamics_learning.sim.trajectories import JointReference, ReferenceConfig
import torch

QUIET = {'noise_position': 0.0, 'noise_velocity': 0.0, 'noise_effort': 0.0}


def simulate(seconds: float, **config) -> tuple:
    sim = ArmSimulator(ArmConfig(**{**QUIET, **config}))
    samples = [sim.run(50) for _ in range(int(seconds * 1000 / 50))]
    return sim, {name: np.concatenate([getattr(s, name) for s in samples])
                 for name in ('time', 'position', 'velocity', 'effort', 'acceleration')}


def test_block_integrator_matches_one_aba_call_per_step():
    _, block = simulate(0.5, integrator='block')
    _, exact = simulate(0.5, integrator='aba')
    assert np.abs(block['position'] - exact['position']).max() < 1e-3   # rad
    assert np.abs(block['effort'] - exact['effort']).max() < 0.05 * np.abs(exact['effort']).max()


def test_tracks_the_reference_and_is_reproducible():
    sim, out = simulate(1.0)
    reference = sim.reference(out['time'])[0]
    assert np.abs(out['position'][:, 0] - reference).max() < 0.05   # rad
    _, again = simulate(1.0)
    np.testing.assert_array_equal(out['effort'], again['effort'])
    assert sim.joint_names == list(load_urdf(find_urdf()).joint_names)


def test_effort_is_rigid_body_plus_unmodelled_effects():
    """Measured torque differs from the nominal RNEA by friction, motor inertia, elasticity."""
    sim, out = simulate(1.0)
    names = ('position', 'velocity', 'acceleration')
    q, qd, qdd = (torch.from_numpy(out[k][:, 0]) for k in names)
    nominal = rnea(sim.nominal, q, qd, qdd).numpy()
    residual = out['effort'][:, 0] - nominal
    coulomb = np.asarray(sim.config.coulomb)
    # Friction opposes the motion: the residual correlates with sign(qd) per joint.
    moving = np.abs(out['velocity'][:, 0]) > 0.05
    agree = np.mean(np.sign(residual[moving]) == np.sign(out['velocity'][:, 0][moving]))
    assert agree > 0.7
    assert np.mean(np.abs(residual)) > 0.3 * coulomb.mean()


def test_payload_adds_gravity_torque_at_the_shoulder():
    sim = ArmSimulator(ArmConfig(**QUIET))
    q = torch.from_numpy(sim.q.copy())
    before = rnea(sim._true, q, torch.zeros_like(q), torch.zeros_like(q))
    sim.set_payload(2.0)
    after = rnea(sim._true, q, torch.zeros_like(q), torch.zeros_like(q))
    assert sim.payload[0] == 2.0
    assert float((after - before).abs().max()) > 0.5      # N m: 2 kg on a ~1 m lever
    assert (after - before).abs()[0, -1] < 1e-6           # the last axis carries no moment
    with pytest.raises(ValueError, match='payload mass'):
        sim.set_payload(-1.0)


def test_payload_urdf_and_config_errors_name_the_value():
    text = find_urdf().read_text()
    assert urdf_with_payload(text, 0.0, (0, 0, 0), 'no_such_link') == text
    with pytest.raises(ValueError, match='no_such_link'):
        urdf_with_payload(text, 1.0, (0, 0, 0), 'no_such_link')
    with pytest.raises(ValueError, match='stiffness'):
        ArmConfig(stiffness=(0.0,) * 7)
    with pytest.raises(ValueError, match='integrator'):
        ArmConfig(integrator='rk4')
    with pytest.raises(ValueError, match='coulomb has 2 entries'):
        ArmSimulator(ArmConfig(coulomb=(1.0, 1.0)))


@pytest.mark.parametrize('mode', ['excitation', 'reaching', 'mixed'])
def test_reference_derivatives_are_consistent_and_inside_the_limits(mode):
    lower, upper = -np.ones(3), np.array([1.0, 2.0, 0.5])
    reference = JointReference(lower, upper, ReferenceConfig(mode=mode, seed=3))
    t = np.arange(0.0, 20.0, 1e-3)
    q, qd, qdd = reference(t)
    assert np.all(q >= lower) and np.all(q <= upper)
    np.testing.assert_allclose(np.gradient(q, t, axis=0)[1:-1], qd[1:-1], atol=2e-3)
    np.testing.assert_allclose(np.gradient(qd, t, axis=0)[1:-1], qdd[1:-1], atol=0.05)
    # The same time gives the same value however it is evaluated (no hidden history).
    np.testing.assert_array_equal(reference(t[5000:5001])[0], q[5000:5001])
    with pytest.raises(ValueError, match='mode'):
        ReferenceConfig(mode='random')


def test_sample_rates_below_1_khz_integrate_in_steps_of_at_most_1_ms():
    config = ArmConfig(**{**QUIET, 'dt': 2e-3})
    assert config.euler_steps == 2 and ArmConfig(**QUIET).euler_steps == 1
    sim = ArmSimulator(config)
    samples = sim.run(1500)    # 3 s: at 2 ms Euler steps the elastic joints diverged at 1.9 s
    assert np.isfinite(samples.position).all() and np.isfinite(samples.effort).all()
