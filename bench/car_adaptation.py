"""
Adaptation to a new surface while driving (issue 22 item 3), in simulation and on real data.

1. Simulation (`sim`): the shipped sim model drives the oval with the MPC (target 1.75 m/s,
   32 + 16 line-search steps, `demo_lap.drive_laps`: 240 Hz simulator, emulated mocap,
   causal estimator); at `CHANGE_S` both friction coefficients halve (`sim.car.FrictionChange`).
   Once without adaptation, once with `CarAdaptation`: every MPC tick gives it the estimated
   state and the command by their stamps, it runs the updates its budget allows
   (`train_pending`: deterministic, the node trains in a thread) and the MPC swaps in each
   newly published copy of the weights (`weights_swapper`). Steady values: the laps that
   end before the change (the first, from rest, excluded). Recovered: the third full lap
   after the change is within 20 % of the steady lap time and max |lateral error|. Model
   check: the shipped and the adapted model (the last published copy) on the true states of
   the driving from `CHANGE_S` + 10 s on (1 s open-loop position error; the adapted model has
   trained on the estimated states of the same driving: an in-sample check that it learned
   the new surface, not a held-out score).
   Oracle (`oracle`): what the MPC achieves on the new surface with a model that knows it:
   the shipped model drives 4 laps on half friction from the start, a copy is fitted on the
   true states of exactly that driving (100 one-step epochs, then 30 rollout epochs:
   in-sample, an optimistic bound on what adaptation can give), and drives 4 laps again.
2. Real data (`real`): the DART recordings on another surface (`81_circles_tape_and_tiles`,
   two Vicon recordings of steady circles on tape and tiles; the shipped DART model's
   training set included them, so base models are trained here without them): an MLP and the
   bicycle trained on the other recordings; the MLP fine-tuned on the first `FIT_SHARE` of
   each new-surface recording (the same `ContinualTrainer` updates as online, replayed); all
   evaluated on the rest (1 s open-loop position error, one-step relative L1).
Writes bench/results/car_adaptation.json. Usage: python -m bench.car_adaptation
[sim|oracle|real ...] (default all).
"""
import copy
import dataclasses
import functools
import json
from pathlib import Path
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np
from robot_dynamics_learning.control.car_evaluation import evaluate_car_model
from robot_dynamics_learning.control.car_training import (DEFAULT_LR, fit_car_model,
                                                          fit_car_rollout, load_car_model,
                                                          train_car)
from robot_dynamics_learning.control.demo_lap import DEFAULT_MODEL, drive_laps
from robot_dynamics_learning.data.car_datasets import car_dataset
from robot_dynamics_learning.data.datasets import load_rc_car, rc_car_files
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.learning.car_adaptation import (CarAdaptation, CarAdaptationConfig,
                                                             weights_swapper)
from robot_dynamics_learning.learning.checkpoint import save_checkpoint
from robot_dynamics_learning.models.car_base import CarModel
from robot_dynamics_learning.sim.car import FrictionChange
import torch
from tqdm import tqdm

RESULTS = Path(__file__).resolve().parent / 'results' / 'car_adaptation.json'
TARGET_SPEED = 1.75
CHANGE_S = 20.0
LAPS = 7.0
TOLERANCE = 0.2
SEEDS = (0, 1)
# Tried on seed 0 (lap times of the three laps after the change; none recovered): learning
# rate 3e-4 with half of each batch from the ring 8.6, 7.7, 7.7 s (chosen); 1e-4: 8.2, 8.15,
# 9.75 s; 1e-3 with 3 updates per transition: 9.45, 10.65, 10.65 s; 2e-3 with 2: 9.2, 9.15,
# 16.55 s; without command_delay_s the car left the track for good after the change.
ADAPTATION = CarAdaptationConfig(min_transitions=20, batch_size=128, learning_rate=3e-4,
                                 updates_per_transition=1.0, recent_capacity=400,
                                 recent_fraction=0.5, publish_every=10, command_delay_s=0.04)


def _laps_summary(lap_times: List[float], lateral: List[float], change_s: float) -> dict:
    """Steady values before the change and the full laps after it (see the docstring)."""
    ends = np.cumsum(lap_times)
    before = [k for k in range(1, len(ends)) if ends[k] <= change_s]
    after = [k for k in range(len(ends)) if ends[k] - lap_times[k] >= change_s]
    steady_time = float(np.mean([lap_times[k] for k in before]))
    steady_lateral = float(np.mean([lateral[k] for k in before]))
    rel_time = [lap_times[k] / steady_time - 1.0 for k in after]
    rel_lateral = [lateral[k] / steady_lateral - 1.0 for k in after]
    within = [abs(t) <= TOLERANCE and abs(e) <= TOLERANCE for t, e in zip(rel_time, rel_lateral)]
    return {'lap_times_s': lap_times, 'lap_max_lateral_m': lateral,
            'steady_lap_time_s': steady_time, 'steady_max_lateral_m': steady_lateral,
            'laps_after_change_relative_time': rel_time,
            'laps_after_change_relative_lateral': rel_lateral,
            'first_recovered_lap_after_change': (within.index(True) + 1 if any(within)
                                                 else None),
            'recovered_within_3_laps': len(within) >= 3 and within[2]}


def sim_run(adapt: bool, seed: int = 0, config: CarAdaptationConfig = ADAPTATION) -> dict:
    """Drive LAPS laps with friction halving at CHANGE_S, with or without adaptation."""
    adaptation: Optional[CarAdaptation] = None
    swaps = [0]
    shipped: List[CarModel] = []

    def on_tick(stamp: float, state: np.ndarray, command: np.ndarray, mpc) -> None:
        nonlocal adaptation
        if adaptation is None:
            learner = copy.deepcopy(mpc.model)   # the MPC's copy is frozen (no gradients)
            shipped.append(copy.deepcopy(mpc.model))
            learner.requires_grad_(True)
            adaptation = CarAdaptation(learner, config, np.random.default_rng(seed))
            adaptation.swap = weights_swapper(adaptation, mpc.load_state_dict)
        adaptation.add_state(stamp, state)
        adaptation.add_command(stamp, command)
        adaptation.train_pending()
        swaps[0] += adaptation.swap()

    started = time.perf_counter()
    torch.manual_seed(seed)
    lap = drive_laps(laps=LAPS, target_speed=TARGET_SPEED, candidates=32, refine_candidates=16,
                     friction=FrictionChange(CHANGE_S, 0.5), seed=seed,
                     max_time_s=LAPS * 15.0, on_tick=on_tick if adapt else None)
    result = _laps_summary(lap['lap_times_s'], lap['lap_max_lateral_m'], CHANGE_S)
    result.update(completed=lap['completed'], wall_s=time.perf_counter() - started,
                  weight_swaps=swaps[0])
    if adaptation is not None:
        result['learner'] = adaptation.diagnostics()
        driven = _driven(lap['arrays'], CHANGE_S + 10.0)
        result['new_surface_position_error_1s_m'] = {
            name: evaluate_car_model(model, driven, 20)['position_error_m']
            for name, model in (('shipped', shipped[0]),
                                ('adapted', adaptation.published().model))}
    return result


def sim() -> Dict[str, dict]:
    """Part 1: the same runs (mocap noise seeds) without and with online adaptation."""
    runs = {f'{name}_seed{seed}': sim_run(adapt, seed) for seed in SEEDS
            for name, adapt in (('no_adaptation', False), ('adaptation', True))}
    return {'target_speed_mps': TARGET_SPEED, 'friction_change_s': CHANGE_S,
            'friction_factor': 0.5, 'tolerance': TOLERANCE,
            'adaptation_config': ADAPTATION.__dict__, **runs}


def _driven(arrays: dict, since_s: float = 0.0):
    """Return the true states and commands of a `drive_laps` run from since_s as a data set."""
    keep = arrays['time'] >= since_s
    return car_dataset([Trajectory(time=arrays['time'][keep],
                                   observations=arrays['state'][keep, :3],
                                   actions=arrays['command'][keep])], 0.05)


def oracle(laps: float = 4.0) -> dict:
    """Laps on half friction with the shipped model, then with a copy fitted on them."""
    half = FrictionChange(0.0, 0.5)
    drive = functools.partial(drive_laps, laps=laps, target_speed=TARGET_SPEED, candidates=32,
                              refine_candidates=16, friction=half, max_time_s=laps * 15.0)
    shipped = drive()
    data = _driven(shipped['arrays'])
    model = load_car_model(DEFAULT_MODEL)
    before = evaluate_car_model(model, data, 20)['position_error_m']
    fit_car_model(model, data, 100, lr=5e-4)
    fit_car_rollout(model, data, 30, lr=3e-4)
    after = evaluate_car_model(model, data, 20)['position_error_m']
    with tempfile.TemporaryDirectory() as folder:
        path = save_checkpoint(Path(folder) / 'fitted.pt', model)
        fitted = drive(model_path=path)
    return {'shipped_model': {'lap_times_s': shipped['lap_times_s'],
                              'lap_max_lateral_m': shipped['lap_max_lateral_m'],
                              'position_error_1s_m': before},
            'fitted_model': {'lap_times_s': fitted['lap_times_s'],
                             'lap_max_lateral_m': fitted['lap_max_lateral_m'],
                             'position_error_1s_m': after}}


NEW_SURFACE = '81_circles_tape_and_tiles'
FIT_SHARE = 0.3
BASE_EPOCHS = 150
# learning rate: a quarter of each model's training rate (DEFAULT_LR); half of each batch
# from the new surface (the ring), half from a uniform sample of everything (the reservoir,
# mostly the old surface: against forgetting and over-fitting the few new transitions)
FINE_TUNE = CarAdaptationConfig(batch_size=128, updates_per_transition=1.0,
                                reservoir_transitions=5000, recent_fraction=0.5)


def _head(trajectory: Trajectory, share: float, tail: bool = False) -> Trajectory:
    """Return the first `share` of a drive by time (or the rest with tail)."""
    cut = trajectory.time[0] + share * (trajectory.time[-1] - trajectory.time[0])
    keep = trajectory.time > cut if tail else trajectory.time <= cut
    return Trajectory(time=trajectory.time[keep], observations=trajectory.observations[keep],
                      actions=trajectory.actions[keep], units=trajectory.units,
                      source=f'{trajectory.source} ({"after" if tail else "up to"} {cut:.1f} s)')


def fine_tune(model: CarModel, old, fit, learning_rate: float, seed: int = 0) -> CarModel:
    """
    Replay the transitions through `CarAdaptation`: the old surface's, then the new one's.

    The old ones only fill the buffer (the warm-up: min_transitions is their count); each new
    one is followed by the updates the budget allows, as online.
    """
    before, after = old.transitions(), fit.transitions()
    count = before.observations.shape[0]
    config = dataclasses.replace(FINE_TUNE, learning_rate=learning_rate, min_transitions=count,
                                 recent_capacity=after.observations.shape[0])
    adaptation = CarAdaptation(model, config, np.random.default_rng(seed))
    stream = [(batch, k) for batch in (before, after) for k in range(batch.observations.shape[0])]
    for n, (batch, k) in enumerate(tqdm(stream, desc='fine-tune', mininterval=2.0)):
        adaptation.buffer.append(n * fit.h, batch.observations[k, 0].numpy(),
                                 batch.actions[k, 0].numpy(), batch.targets[k, 0].numpy())
        if n >= count:
            adaptation.train_pending()
    model.eval()
    return model


def real(h: float = 0.05) -> dict:
    """Part 2: models from the other recordings, fine-tuned on the new surface's first part."""
    files = rc_car_files()
    new = [f for f in files if f.parent.name == NEW_SURFACE]
    if not new:
        raise FileNotFoundError(f'no {NEW_SURFACE} recordings with Vicon in the DART data')
    old = car_dataset([load_rc_car(f) for f in files if f.parent.name != NEW_SURFACE], h)
    drives = [load_rc_car(f) for f in new]
    fit = car_dataset([_head(d, FIT_SHARE) for d in drives], h)
    rest = car_dataset([_head(d, FIT_SHARE, tail=True) for d in drives], h)
    horizon = int(round(1.0 / h))
    result = {'new_surface': NEW_SURFACE, 'files': [f.name for f in new], 'fit_share': FIT_SHARE,
              'fit_transitions': int(fit.transitions().observations.shape[0]),
              'test_transitions': int(rest.transitions().observations.shape[0]),
              'base_train_transitions': int(old.transitions().observations.shape[0]),
              'base_epochs': BASE_EPOCHS, 'fine_tune_config': FINE_TUNE.__dict__}
    for name in ('car_mlp', 'car_bicycle'):
        model, _ = train_car(name, old, rest, lr=DEFAULT_LR[name], epochs=BASE_EPOCHS)
        result[f'{name}_base'] = evaluate_car_model(model, rest, horizon)
        result[f'{name}_fine_tuned'] = evaluate_car_model(
            fine_tune(model, old, fit, DEFAULT_LR[name] / 4), rest, horizon)
    mlp, bicycle = (result['car_mlp_fine_tuned']['position_error_m'],
                    result['car_bicycle_base']['position_error_m'])
    result['fine_tuned_mlp_beats_bicycle'] = mlp < bicycle
    result['fine_tuned_mlp_beats_fine_tuned_bicycle'] = (
        mlp < result['car_bicycle_fine_tuned']['position_error_m'])
    return result


def main(parts: Optional[List[str]] = None) -> None:
    """Run the asked parts (default both) and merge them into the JSON."""
    parts = parts or ['sim', 'oracle', 'real']
    torch.set_num_threads(1)
    result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if 'sim' in parts:
        result['sim'] = sim()
    if 'oracle' in parts:
        result['oracle'] = oracle()
    if 'real' in parts:
        result['real'] = real()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, default=float))
    print(json.dumps(result, indent=2, default=float))


if __name__ == '__main__':
    main(sys.argv[1:])
