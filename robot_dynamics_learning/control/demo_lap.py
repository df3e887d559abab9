"""
One simulated lap with the MPC, offline (no ROS): what `make demo` shows for the car.

The learned model (config/models/car_mlp_sim.pt, trained on simulated mocap data) drives the
drifting simulator around config/tracks/oval.yaml; the state fed to the MPC comes from the
simulator through emulated mocap (noise, 2 % dropouts) and the causal estimator, as on the
real car. Saves car_lap.png (track, path, commands) and car_lap.json.
"""
import json
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np
from robot_dynamics_learning.control.car_training import load_car_model
from robot_dynamics_learning.control.mpc import MPCConfig, TrackMPC
from robot_dynamics_learning.control.optimizer import make_optimizer
from robot_dynamics_learning.control.track import LapCounter, load_track_spec, Track
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.signals.mocap import emulated_mocap_config, MocapEstimator
from robot_dynamics_learning.sim.car import (car_step, CarParams, emulate_mocap,
                                             FrictionChange, MocapNoise)
import torch
from tqdm import tqdm

DEFAULT_MODEL = resource('config/models/car_mlp_sim.pt')
DEFAULT_TRACK = resource('config/tracks/oval.yaml')
DEFAULT_SOLVER = 'line_search'   # the car_mpc node's default (config/car.yaml)
# Called after each MPC tick with (the state's stamp in s, the estimated state, the command
# sent, the MPC): the online-adaptation bench feeds its learner and swaps weights there.
TickHook = Callable[[float, np.ndarray, np.ndarray, TrackMPC], None]


def build_mpc(model_path: Path = DEFAULT_MODEL, track_path: Path = DEFAULT_TRACK,
              target_speed: float = 1.5, iterations: int = 3,
              candidates: int = 512, solver: str = DEFAULT_SOLVER,
              budget_s: float = 10.0, refine_candidates: int = 0,
              degrade: bool = True, mpc_config: Optional[MPCConfig] = None) -> TrackMPC:
    """
    Return the lap's MPC (one torch thread; default budget 10 s: solve time not simulated).

    mpc_config: the MPC's settings as a whole (car_mpc's, `CarMPCConfig.mpc_config`); then
    target_speed, budget_s and degrade are taken from it.
    """
    torch.set_num_threads(1)
    config = mpc_config or MPCConfig(target_speed=target_speed, budget_s=budget_s,
                                     degrade=degrade)
    return TrackMPC(load_car_model(Path(model_path)), Track(load_track_spec(Path(track_path))),
                    config, make_optimizer(solver, config.horizon, iterations, candidates,
                                           refine_candidates=refine_candidates))


def solve_ms(candidates: int = 512, solves: int = 3, refine_candidates: int = 0) -> float:
    """
    Return the median wall time (ms) of `solves` MPC ticks at the lap's start, as in the lap.

    The first tick (cold: allocations, no warm start) is not counted. `make demo` calls this
    before the lap to choose `candidates` on a slow or busy computer.
    """
    mpc = build_mpc(candidates=candidates, refine_candidates=refine_candidates)
    state = np.zeros(6)
    state[:3] = mpc.track.pose_at(0.0)
    state[3] = 1.0
    times = [mpc.solve(state).seconds for _ in range(solves + 1)][1:]
    return float(np.median(times) * 1e3)


def drive_laps(model_path: Path = DEFAULT_MODEL, track_path: Path = DEFAULT_TRACK,
               laps: float = 1.0, target_speed: float = 1.5, iterations: int = 3,
               candidates: int = 512, seed: int = 0, max_time_s: float = 60.0,
               noise: Optional[MocapNoise] = None, solver: str = DEFAULT_SOLVER,
               budget_s: Optional[float] = None, progress: bool = False,
               refine_candidates: int = 0, degrade: bool = True,
               friction: Optional[FrictionChange] = None,
               on_tick: Optional[TickHook] = None,
               mpc_config: Optional[MPCConfig] = None) -> Dict[str, object]:
    """
    Drive `laps` laps in simulated time; return metrics and the logged arrays.

    progress: show a bar of simulated seconds (a lap takes minutes of CPU).

    The simulator runs at 240 Hz with mocap at every step; the MPC ticks every model step h
    on the estimator's state. Solve time is not simulated (the control loop is ideal) unless
    `budget_s` is given: then a tick that misses it drives on its plan so far with `degrade`
    (counted in `late_ticks`), and without it, as car_mpc did, sends the brake command and
    forgets the warm start (counted in `brakes`). friction: a surface change during the run;
    on_tick: see `TickHook`; mpc_config: see `build_mpc`. Per lap: `lap_times_s` and
    `lap_max_lateral_m`.
    """
    mpc = build_mpc(model_path, track_path, target_speed, iterations, candidates, solver,
                    10.0 if budget_s is None else budget_s, refine_candidates, degrade,
                    mpc_config)
    model, track = mpc.model, mpc.track
    noise = noise or MocapNoise()
    rng = np.random.default_rng(seed)
    params = CarParams(dt=1.0 / noise.rate_hz)
    substeps = int(round(model.h / params.dt))
    state = np.zeros((1, 6))
    state[0, :3] = track.pose_at(0.0)
    estimator = MocapEstimator(emulated_mocap_config())
    log = {'time': [], 'state': [], 'command': [], 'lateral': [], 'solve_s': [],
           'iterations': [], 'late': [], 'brake': []}
    counter, sim_time = LapCounter(track, state[0, :2]), 0.0
    command = np.zeros(2)
    bar = tqdm(total=round(max_time_s), disable=not progress, desc='lap', unit='sim s',
               mininterval=1.0)
    while counter.laps < laps and sim_time < max_time_s:
        estimate = estimator.estimate()
        if estimate is not None:
            result = mpc.solve(estimate.state)
            command = result.command if result.ok else mpc.brake
            if not result.ok:
                mpc.reset()   # as car_mpc: a brake forgets the warm start
            log['solve_s'].append(result.seconds)
            log['iterations'].append(result.iterations)
            log['late'].append(result.reason in ('late', 'warm_start'))
            log['brake'].append(not result.ok)
            if on_tick is not None:
                on_tick(estimate.stamp, estimate.state, command, mpc)
        for _ in range(substeps):
            surface = params if friction is None else friction.params_at(params, sim_time)
            state, _ = car_step(state, command[None], surface)
            sim_time += params.dt
            valid, pose = emulate_mocap(state, noise, rng)
            if valid[0]:
                estimator.update(sim_time, *pose[0])
        lateral = counter.update(sim_time, state[0, :2])
        log['time'].append(sim_time)
        log['state'].append(state[0].copy())
        log['command'].append(command.copy())
        log['lateral'].append(lateral)
        bar.update(int(sim_time) - bar.n)
        bar.set_postfix_str(f'{counter.laps:.2f} laps', refresh=False)
    bar.close()
    arrays = {k: np.asarray(v) for k, v in log.items()}
    lateral = np.abs(arrays['lateral'])
    return {
        'laps': float(counter.laps),
        'lap_time_s': float(sim_time / max(counter.laps, 1e-9)),
        'sim_time_s': float(sim_time), 'completed': bool(counter.laps >= laps),
        'max_lateral_m': float(lateral.max()), 'half_width_m': track.half_width,
        'left_track': bool(lateral.max() > track.half_width),
        'mean_speed_mps': float(np.mean(np.hypot(arrays['state'][:, 3], arrays['state'][:, 4]))),
        'budget_misses': int(np.sum(arrays['solve_s'] > mpc.config.budget_s)),
        'late_ticks': int(np.sum(arrays['late'])), 'brakes': int(np.sum(arrays['brake'])),
        'lap_times_s': counter.lap_times(),
        'lap_max_lateral_m': counter.lap_max_lateral(),
        'ticks': int(len(arrays['solve_s'])), 'solver': solver,
        'solve_ms_p50': float(np.percentile(arrays['solve_s'], 50) * 1e3),
        'solve_ms_p99': float(np.percentile(arrays['solve_s'], 99) * 1e3),
        'arrays': arrays, 'track': track}


def plot_lap(result: Dict[str, object], path: Path) -> Path:
    """Save a two-panel PNG: track with the driven path, and the commands over time."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    track, arrays = result['track'], result['arrays']
    fig, (ax_map, ax_cmd) = plt.subplots(1, 2, figsize=(13, 5))
    normal = np.stack([-track.tangents[:, 1], track.tangents[:, 0]], axis=1)
    for side in (-1.0, 1.0):
        edge = track.points + side * track.half_width * normal
        ax_map.plot(*np.vstack([edge, edge[:1]]).T, 'k-', lw=1,
                    label=f'track bounds (+-{track.half_width:.2f} m)' if side > 0 else None)
    ax_map.plot(*np.vstack([track.points, track.points[:1]]).T, 'k:', lw=0.7,
                label='centre line')
    speed = np.hypot(arrays['state'][:, 3], arrays['state'][:, 4])
    points = ax_map.scatter(arrays['state'][:, 0], arrays['state'][:, 1], c=speed, s=4,
                            cmap='viridis', label='driven path (colour: speed)')
    fig.colorbar(points, ax=ax_map, label='speed (m/s)')
    ax_map.legend(loc='center', fontsize=8)   # inside the oval, clear of the track
    ax_map.set_aspect('equal')
    ax_map.set_xlabel('x (m)')
    ax_map.set_ylabel('y (m)')
    ax_map.set_title(f"MPC lap: {result['lap_time_s']:.2f} s/lap, max |lateral| "
                     f"{result['max_lateral_m']:.2f} m of {result['half_width_m']:.2f} m")
    ax_cmd.plot(arrays['time'], arrays['command'][:, 0], label='throttle')
    ax_cmd.plot(arrays['time'], arrays['command'][:, 1], label='steering')
    ax_cmd.plot(arrays['time'], speed, label='speed (m/s)', alpha=0.6)
    ax_cmd.set_xlabel('time (s)')
    ax_cmd.legend()
    ax_cmd.set_title('commands (normalised) and speed')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(out_dir: Path, candidates: int = 512, refine_candidates: int = 0) -> dict:
    """
    Drive one lap, save car_lap.png and car_lap.json in out_dir, return the metrics.

    candidates (then refine_candidates finer ones): line-search step sizes per MPC iteration
    (fewer: a faster lap in wall time on a slow computer; the metrics include the numbers).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = drive_laps(candidates=candidates, refine_candidates=refine_candidates)
    plot_lap(result, out_dir / 'car_lap.png')
    metrics = {k: v for k, v in result.items() if k not in ('arrays', 'track')}
    metrics.update(plot=str(out_dir / 'car_lap.png'), candidates=candidates,
                   refine_candidates=refine_candidates)
    (out_dir / 'car_lap.json').write_text(json.dumps(metrics, indent=2))
    return metrics
