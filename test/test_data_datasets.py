"""Loaders of the shared real-robot data: what they derive from the recordings."""
import numpy as np
from robot_dynamics_learning.data import datasets


def test_schunk_acceleration_is_the_smoothed_derivative_of_the_measured_velocity():
    run = datasets.load_schunk(runs=[80])[0]  # the run that sweeps every joint
    assert run.qdd.shape == run.qd.shape
    raw = np.gradient(run.qd, run.time, axis=0)
    for joint in range(6):
        assert np.corrcoef(run.qdd[:, joint], raw[:, joint])[0, 1] > 0.9
    # smoothing, not a shift: the zero-phase filter removes noise but keeps the timing
    lag = [np.argmax(np.correlate(run.qdd[:, j], raw[:, j], 'full')) - (len(run) - 1)
           for j in range(6)]
    assert lag == [0] * 6
    assert np.std(run.qdd - raw) < np.std(raw)
