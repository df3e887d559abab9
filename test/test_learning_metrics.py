"""Metrics that keep the judging honest: change nMSE, calibration, coverage of the inputs."""
import numpy as np
from robot_dynamics_learning.learning.metrics import (calibration, change_nmse_per_output,
                                                      coverage_warnings, range_coverage)


def test_change_nmse_scores_the_previous_value_about_one_and_skill_below():
    rng = np.random.default_rng(0)
    target = np.cumsum(rng.normal(size=(5000, 2)), axis=0)
    previous = np.vstack([target[:1], target[:-1]])
    assert np.allclose(change_nmse_per_output(previous, target, previous), 1.0, atol=0.01)
    half_way = previous + 0.5 * (target - previous)
    assert np.allclose(change_nmse_per_output(half_way, target, previous), 0.25, atol=0.01)
    assert np.allclose(change_nmse_per_output(target, target, previous), 0.0)


def test_calibration_of_gaussian_errors_matches_the_normal_shares():
    rng = np.random.default_rng(1)
    std = rng.uniform(0.5, 2.0, size=(20000, 3))
    target = rng.normal(scale=std)
    result = calibration(np.zeros_like(target), std ** 2, target)
    assert abs(result['within_1_std'] - 0.683) < 0.01
    assert abs(result['within_2_std'] - 0.954) < 0.01
    overconfident = calibration(np.zeros_like(target), (0.3 * std) ** 2, target)
    assert overconfident['within_1_std'] < 0.3 and overconfident['nll'] > result['nll']


def test_coverage_names_the_inputs_that_leave_the_training_range():
    train = np.column_stack([np.linspace(0, 1, 100), np.linspace(-1, 1, 100)])
    test = np.column_stack([np.linspace(0.5, 2.0, 100), np.linspace(-0.5, 0.5, 100)])
    coverage = range_coverage(train, test)
    assert coverage['outside'][1] == 0.0
    assert 0.6 < coverage['outside'][0] < 0.7   # above 1.05 of the range [0, 1]
    lines = coverage_warnings(coverage, ['q joint_1', 'q joint_2'])
    assert len(lines) == 1 and lines[0].startswith('q joint_1') and '[0, 1]' in lines[0]
