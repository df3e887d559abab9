"""Offline scenarios: slip demand, initial plans, and the open-loop (rollout) fine-tuning."""
import math

import numpy as np
import pytest
from robot_dynamics_learning.control.car_training import (build_car_model, fit_car_model,
                                                          fit_car_rollout, rollout_loss)
from robot_dynamics_learning.control.scenarios import (run_scenario, Scenario,
                                                       SCENARIO_BY_NAME, slip_shortfall)
from robot_dynamics_learning.data.car_datasets import car_dataset
from robot_dynamics_learning.sim.car import (CarParams, MocapNoise, rear_slip_angle, simulate,
                                             slip_angle)
from robot_dynamics_learning.sim.driving import simulated_drives
import torch


def _states(vx, vy):
    states = torch.zeros(1, 3, 6)
    states[0, 1, 3], states[0, 1, 4] = vx, vy
    return states


def test_slip_shortfall_is_one_sided_and_signed():
    demand = ((1, -0.4),)  # at least 0.4 rad with the velocity to the car's right
    sliding = _states(1.0, -math.tan(0.5))
    assert float(slip_shortfall(sliding, demand)) == 0.0
    gripping = _states(1.0, 0.0).requires_grad_(True)
    cost = slip_shortfall(gripping, demand)
    assert float(cost.detach()) == pytest.approx(0.16)
    cost.sum().backward()
    assert float(gripping.grad[0, 1, 4]) > 0  # descending pushes vy to the right
    wrong_way = _states(1.0, math.tan(0.5))
    assert float(slip_shortfall(wrong_way, demand)) == pytest.approx(0.9 ** 2)
    assert float(slip_shortfall(wrong_way, ())) == 0.0
    # a gripping left turn: the centre of mass moves to the left, the rear axle straight on
    turning = _states(1.0, 0.1 * 2.0)
    turning[0, 1, 5] = 2.0
    assert float(slip_shortfall(turning, demand, rear_to_cg=0.1)) == pytest.approx(0.16)


def test_initial_plan_fills_the_controls_in_order():
    scenario = Scenario('x', 6, ((5, (0.0, 0.0, 0.0)),), initial_throttle=0.2,
                        initial_plan=((2, 0.5, 0.0), (3, 1.0, -1.0)))
    u = scenario.initial_controls()
    assert u.shape == (6, 2)
    assert torch.equal(u[:, 0], torch.tensor([0.5, 0.5, 1.0, 1.0, 1.0, 0.2]))
    assert torch.equal(u[:, 1], torch.tensor([0.0, 0.0, -1.0, -1.0, -1.0, 0.0]))


def test_drifting_turn_start_plan_drifts_in_the_simulator():
    """The drifting turn asks for a manoeuvre our simulated car makes only by sliding."""
    scenario = SCENARIO_BY_NAME['drifting_turn']
    states = simulate(np.zeros((1, 6)), scenario.initial_controls().numpy()[None].astype(float),
                      CarParams(), 0.05)[0]
    step, demand = scenario.slip_targets[0]
    slip = slip_angle(states)
    assert np.degrees(slip.min()) < -20  # rear out of a left turn
    assert np.degrees(rear_slip_angle(states, CarParams()).min()) < -25
    assert slip[step + 1] < 0.8 * demand
    assert states[-1, 2] > 0.8 * math.pi  # turned round


def test_scenario_run_reports_errors_and_slip_angles_from_the_simulator():
    torch.manual_seed(0)
    model = build_car_model('car_mlp')
    result = run_scenario(model, SCENARIO_BY_NAME['drifting_turn'], CarParams(), starts=3,
                          iterations=1)
    assert result['runs'] == 3 and result['simulated'].shape == (61, 6)
    assert 0 <= result['mean_end_error_m'] <= result['max_end_error_m']
    rear = np.degrees(np.abs(rear_slip_angle(result['simulated'], CarParams()))).max()
    assert result['least_max_rear_slip_deg'] <= rear <= result['max_rear_slip_deg']
    assert result['mean_max_side_slip_deg'] <= result['max_side_slip_deg']
    # one iteration leaves the driver's recipe almost unchanged: the simulated car slides
    assert result['least_max_rear_slip_deg'] > 20


def test_rollout_fine_tuning_lowers_the_open_loop_loss():
    torch.manual_seed(0)
    data = car_dataset(simulated_drives(90.0, CarParams(), MocapNoise(), seed=7, cars=3), 0.05)
    model = build_car_model('car_mlp')
    model.fit_normalization(data.transitions())
    fit_car_model(model, data, 3, 2e-3)
    windows = data.windows(10, 5)
    with torch.no_grad():
        before = float(rollout_loss(model, windows))
    history = fit_car_rollout(model, data, 3, horizon=10, lr=1e-3, stride=5)
    with torch.no_grad():
        after = float(rollout_loss(model, windows))
    assert len(history) == 3 and after < before
    with pytest.raises(ValueError, match='epochs'):
        fit_car_rollout(model, data, 0)
