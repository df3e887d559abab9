"""
Targeted training data for the offline scenarios: optimise, play in the simulator, learn.

Why: the random driver rarely brakes from speed into reverse or slides through a tight turn,
and the optimiser drives the learned model exactly where its data are thin, so open-loop
plans missed in the simulator (parallel parking: 0.5 m, 0.39 m of it model error). Each round
optimises every scenario on the current model, plays the plan `runs` times in the simulator
at the mocap rate (start pose, floor friction and initial speed perturbed as in the scenario
evaluation, and the controls with Gaussian noise of std `control_noise` except in the first
run), records the runs through emulated mocap exactly like the random-driving data, and
fine-tunes the model on them mixed with fresh random driving (so that it stays a model of the
whole car, not of the scenarios). This is data aggregation (DAgger-like; the seed's future
work of learning from the car's own driving). The scenarios themselves are still evaluated
open loop, from starts and frictions drawn with another seed.
"""
from dataclasses import replace
from typing import Callable, Dict, List

import numpy as np
from robot_dynamics_learning.control.car_evaluation import evaluate_car_model
from robot_dynamics_learning.control.car_training import fit_car_model, fit_car_rollout
from robot_dynamics_learning.control.scenarios import (optimise_scenario, perturbed_run,
                                                       Scenario, SCENARIOS)
from robot_dynamics_learning.data.car_datasets import car_dataset, CarDataset
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.models.car_base import CarModel
from robot_dynamics_learning.sim.car import (CarParams, DrivingStyle, emulate_mocap, MocapNoise,
                                             simulate)
from robot_dynamics_learning.sim.driving import simulated_drives
from tqdm import tqdm

REST_S = 0.5  # standing still before and after each played plan (s)


def scenario_drives(model: CarModel, scenario: Scenario, runs: int, rng: np.random.Generator,
                    noise: MocapNoise = MocapNoise(), iterations: int = 300,
                    control_noise: float = 0.1) -> List[Trajectory]:
    """Optimise `scenario` on `model` and return `runs` simulated mocap recordings of it."""
    controls, _ = optimise_scenario(model, scenario, iterations)
    fine = CarParams(dt=1.0 / noise.rate_hz)
    substeps = int(round(model.h / fine.dt))
    rest = np.zeros((int(round(REST_S / model.h)), 2))
    drives = []
    for run in range(runs):
        start, params = perturbed_run(rng, fine, 0.02, 0.02, 0.05, 0.05)
        played = controls + (rng.normal(0.0, control_noise, controls.shape) if run else 0.0)
        commands = np.repeat(np.concatenate([rest, np.clip(played, -1.0, 1.0), rest]),
                             substeps, axis=0)
        states = simulate(start[None], commands[None], replace(params, dt=fine.dt),
                          fine.dt)[0, :-1]
        valid, poses = emulate_mocap(states, noise, rng)
        time = np.arange(len(states)) * fine.dt
        drives.append(Trajectory(
            time=time[valid], observations=poses[valid], actions=commands[valid],
            units={'observations': 'm, m, rad', 'actions': 'throttle, steering [-1, 1]'},
            source=f'scenario {scenario.name} run {run}'))
    return drives


def _mix(random: CarDataset, targeted: CarDataset) -> CarDataset:
    """Concatenate two data sets, repeating `targeted` up to about half of `random`'s size."""
    repeat = max(1, len(random.observations) // (2 * len(targeted.observations)))
    parts = [random] + [targeted] * repeat
    segments, offset = [], 0
    for part in parts:
        segments += [(a + offset, b + offset) for a, b in part.segments]
        offset += len(part.observations)
    return CarDataset(np.concatenate([p.observations for p in parts]),
                      np.concatenate([p.actions for p in parts]), random.h, segments)


def refine_on_scenarios(model: CarModel, rounds: int = 3, runs: int = 10,
                        random_minutes: float = 10.0, epochs: int = 15, lr: float = 3e-4,
                        iterations: int = 300, control_noise: float = 0.1, seed: int = 1234,
                        scenarios: tuple = SCENARIOS, test_seconds: float = 120.0,
                        rollout_epochs: int = 0, style: DrivingStyle = DrivingStyle(),
                        log: Callable[[str], None] = print, progress: bool = False
                        ) -> List[Dict[str, float]]:
    """
    Fine-tune `model` in place over `rounds` rounds; return held-out metrics per round.

    The recordings of all rounds accumulate; each round adds `random_minutes` of fresh
    random driving (driven in `style`), fits `epochs` one-step epochs and then
    `rollout_epochs` open-loop epochs (`fit_car_rollout`, lr / 3) on the mix. Metrics:
    `evaluate_car_model` on `test_seconds` of held-out random driving (seed 1000, the
    human-like driver, as `car_data('sim')` holds out) with 1 s rollouts. `progress`: a
    progress bar over the rounds.
    """
    if rounds < 1 or runs < 1 or epochs < 1 or rollout_epochs < 0:
        raise ValueError(f'rounds, runs and epochs must be >= 1 and rollout_epochs >= 0, got '
                         f'{rounds}, {runs}, {epochs}, {rollout_epochs}')
    rng = np.random.default_rng(seed)
    noise = MocapNoise()
    test = car_dataset(simulated_drives(test_seconds, CarParams(), noise, 1000), model.h)
    steps = int(round(1.0 / model.h))
    history = [evaluate_car_model(model, test, steps)]
    log(f'before: {history[-1]}')
    targeted: List[Trajectory] = []
    for round_ in tqdm(range(rounds), desc='refine', unit='round', disable=not progress):
        for scenario in scenarios:
            targeted += scenario_drives(model, scenario, runs, rng, noise, iterations,
                                        control_noise)
        random = car_dataset(simulated_drives(60.0 * random_minutes, CarParams(), noise,
                                              seed + round_, style=style), model.h)
        mix = _mix(random, car_dataset(targeted, model.h))
        fit_car_model(model, mix, epochs, lr, seed=seed + round_)
        if rollout_epochs:
            fit_car_rollout(model, mix, rollout_epochs, lr=lr / 3, seed=seed + round_)
        history.append(evaluate_car_model(model, test, steps))
        log(f'round {round_ + 1}: {history[-1]}')
    return history
