"""
One simulated lap with the MPC, offline (no ROS): what `make demo` shows for the car.

The learned model (config/models/car_mlp_sim.pt, trained on simulated mocap data) drives the
drifting simulator around config/tracks/oval.yaml; the state fed to the MPC comes from the
simulator through emulated mocap (noise, 2 % dropouts) and the causal estimator, as on the
real car. Saves car_lap.png (track, path, commands) and car_lap.json.
"""
import json
from pathlib import Path
from typing import Dict, Optional

import numpy as np
from robot_dynamics_learning.control.car_training import load_car_model
from robot_dynamics_learning.control.mpc import MPCConfig, TrackMPC
from robot_dynamics_learning.control.optimizer import LineSearchOptimizer, OptimizerConfig
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.signals.mocap import MocapEstimator
from robot_dynamics_learning.sim.car import car_step, CarParams, emulate_mocap, MocapNoise
import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / 'config' / 'models' / 'car_mlp_sim.pt'
DEFAULT_TRACK = ROOT / 'config' / 'tracks' / 'oval.yaml'


def drive_laps(model_path: Path = DEFAULT_MODEL, track_path: Path = DEFAULT_TRACK,
               laps: float = 1.0, target_speed: float = 1.5, iterations: int = 3,
               candidates: int = 512, seed: int = 0, max_time_s: float = 60.0,
               noise: Optional[MocapNoise] = None, progress: bool = False
               ) -> Dict[str, object]:
    """
    Drive `laps` laps in simulated time; return metrics and the logged arrays.

    progress: show a bar of simulated seconds (a lap takes minutes of CPU).

    The simulator runs at 240 Hz with mocap at every step; the MPC ticks every model step h
    on the estimator's state (solve time is not simulated: the control loop is ideal).
    """
    torch.set_num_threads(1)
    model = load_car_model(Path(model_path))
    track = Track(load_track_spec(Path(track_path)))
    mpc = TrackMPC(model, track, MPCConfig(target_speed=target_speed, budget_s=10.0),
                   LineSearchOptimizer(OptimizerConfig(iterations=iterations,
                                                       candidates=candidates)))
    noise = noise or MocapNoise()
    rng = np.random.default_rng(seed)
    params = CarParams(dt=1.0 / noise.rate_hz)
    substeps = int(round(model.h / params.dt))
    state = np.zeros((1, 6))
    state[0, :3] = track.pose_at(0.0)
    estimator = MocapEstimator()
    log = {'time': [], 'state': [], 'command': [], 'lateral': [], 'solve_s': [],
           'iterations': []}
    progress, last_s, sim_time = 0.0, track.coordinates(state[0, :2])[0], 0.0
    command = np.zeros(2)
    bar = tqdm(total=round(max_time_s), disable=not progress, desc='lap', unit='sim s',
               mininterval=1.0)
    while progress < laps * track.length and sim_time < max_time_s:
        estimate = estimator.estimate()
        if estimate is not None:
            result = mpc.solve(estimate.state)
            command = result.command
            log['solve_s'].append(result.seconds)
            log['iterations'].append(result.iterations)
        for _ in range(substeps):
            state, _ = car_step(state, command[None], params)
            sim_time += params.dt
            valid, pose = emulate_mocap(state, noise, rng)
            if valid[0]:
                estimator.update(sim_time, *pose[0])
        s, lateral = track.coordinates(state[0, :2])
        progress += (s - last_s + track.length / 2) % track.length - track.length / 2
        last_s = s
        log['time'].append(sim_time)
        log['state'].append(state[0].copy())
        log['command'].append(command.copy())
        log['lateral'].append(lateral)
        bar.update(int(sim_time) - bar.n)
        bar.set_postfix_str(f'{progress / track.length:.2f} laps', refresh=False)
    bar.close()
    arrays = {k: np.asarray(v) for k, v in log.items()}
    lateral = np.abs(arrays['lateral'])
    return {
        'laps': float(progress / track.length),
        'lap_time_s': float(sim_time / max(progress / track.length, 1e-9)),
        'sim_time_s': float(sim_time), 'completed': bool(progress >= laps * track.length),
        'max_lateral_m': float(lateral.max()), 'half_width_m': track.half_width,
        'left_track': bool(lateral.max() > track.half_width),
        'mean_speed_mps': float(np.mean(np.hypot(arrays['state'][:, 3], arrays['state'][:, 4]))),
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
        ax_map.plot(*np.vstack([edge, edge[:1]]).T, 'k-', lw=1)
    ax_map.plot(*np.vstack([track.points, track.points[:1]]).T, 'k:', lw=0.7)
    speed = np.hypot(arrays['state'][:, 3], arrays['state'][:, 4])
    points = ax_map.scatter(arrays['state'][:, 0], arrays['state'][:, 1], c=speed, s=4,
                            cmap='viridis')
    fig.colorbar(points, ax=ax_map, label='speed (m/s)')
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


def run(out_dir: Path) -> dict:
    """Drive one lap, save car_lap.png and car_lap.json in out_dir, return the metrics."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = drive_laps()
    plot_lap(result, out_dir / 'car_lap.png')
    metrics = {k: v for k, v in result.items() if k not in ('arrays', 'track')}
    metrics['plot'] = str(out_dir / 'car_lap.png')
    (out_dir / 'car_lap.json').write_text(json.dumps(metrics, indent=2))
    return metrics
