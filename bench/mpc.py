"""
MPC compute per tick: horizon 20, 3 gradient iterations, 512-candidate line search, no compiler.

Four controllers each drive their own simulated car around the oval (states as the car
really visits them, warm starts as on the car); their ticks alternate, so background load hits
all alike: `TrackMPC` as shipped ('fast': `FusedRollout`, hand-written reverse passes of the
network and of the track costs, the line search's velocities kept for the next gradient), the
same MPC on the autograd path ('autograd', `fast=False`: autograd through the rollout), a
plain eager reference that computes the same costs the straightforward way (`ReferenceMPC`:
the model's one-step `transition` chained per step, autograd, nearest centre-line points by a
direct distance search), and the shipped controller with its line search split over the
machine's two cores ('fast_split_two_threads', `line_search_threads: 2`).
One torch thread. Then the shipped controller alternating with the reference, both with two
intra-op threads ('fast_two_threads', 'reference_two_threads', half the ticks). Writes
bench/results/mpc.json: per-tick wall-clock p50/p99 (ms) and process CPU time p50/p99 (less
sensitive to other jobs on the machine; with two threads it counts both), per-iteration
times, the ratios to the reference, the share of ticks that ran all 3 iterations, and the
largest difference of the controllers' costs on the same 64 controls near the plan, over the
spread of those costs (same function: float32 rounding only). The issue states its eager
implementation's speed (about 28 ms per iteration); each p99 is also given at that speed,
scaled by our reference's time per iteration with the same threads, since this VM's cores
run slower than that and vary by about 1.4x over minutes.
"""
from dataclasses import replace
import json
import os
from pathlib import Path
import time
from typing import Optional

import numpy as np
from robot_dynamics_learning.control.car_training import load_car_model
from robot_dynamics_learning.control.costs import (excursion_cost, limit_barrier,
                                                   progress_cost, regularizer)
from robot_dynamics_learning.control.demo_lap import DEFAULT_MODEL, DEFAULT_TRACK
from robot_dynamics_learning.control.mpc import MPCConfig, TrackMPC
from robot_dynamics_learning.control.optimizer import LineSearchOptimizer, OptimizerConfig
from robot_dynamics_learning.control.track import load_track_spec, Track
from robot_dynamics_learning.sim.car import CarParams, simulate
import torch

RESULTS = Path(__file__).resolve().parent / 'results' / 'mpc.json'
TICKS = 200
ITERATIONS = 3
# The issue's plain eager implementation: about 28 ms per iteration on its machine.
ISSUE_REFERENCE_ITERATION_MS = 28.0
# Every controller's settings but the path and threads; a budget that never cuts a tick short.
CONFIG = MPCConfig(horizon=20, budget_s=10.0, line_search_threads=1)


def reference_project(xy: torch.Tensor, window: tuple) -> tuple:
    """Track coordinates as `Track.project` computes them, by a direct (..., W, 2) search."""
    points, tangents, lengths, offsets = window
    rel = xy.unsqueeze(-2) - points
    nearest = (rel * rel).sum(-1).argmin(-1)
    ahead = (rel.gather(-2, nearest[..., None, None].expand(*nearest.shape, 1, 2))
             .squeeze(-2) * tangents[nearest]).sum(-1)
    k = torch.where((ahead < 0) & (nearest > 0), nearest - 1, nearest)
    d = xy - points[k]
    t = torch.minimum(torch.clamp((d * tangents[k]).sum(-1), min=0.0), lengths[k])
    return offsets[k] + t, d[..., 1] * tangents[k][..., 0] - d[..., 0] * tangents[k][..., 1]


class ReferenceMPC(TrackMPC):
    """The same MPC with the plain eager cost: per-step `transition`, direct projection."""

    def _cost(self, u: torch.Tensor, x0: torch.Tensor, s0: torch.Tensor,
              previous: torch.Tensor, points: torch.Tensor, tangents: torch.Tensor,
              lengths: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        current = x0.expand(u.shape[0], 6)
        outputs = []
        for i in range(u.shape[1]):
            current = self.model.transition(current, u[:, i])
            outputs.append(current)
        states = torch.stack(outputs, dim=1)
        s, lateral = reference_project(states[..., :2], (points, tangents, lengths, offsets))
        return (progress_cost(s[:, -1] - s0, states[..., 3], cfg.target_speed,
                              cfg.progress_weight, cfg.speed_weight)
                + excursion_cost(lateral, self.track.half_width, cfg.track_margin,
                                 cfg.excursion_weight, cfg.centre_weight)
                + regularizer(u, previous, cfg.magnitude_weight, cfg.rate_weight)
                + limit_barrier(u, self.lower, self.upper, cfg.barrier_weight))


def _stats(times: list, cpu: list, iterations: list) -> dict:
    times, cpu = np.asarray(times), np.asarray(cpu)
    return {'tick_ms_p50': float(np.percentile(times, 50)),
            'tick_ms_p99': float(np.percentile(times, 99)),
            'tick_ms_max': float(times.max()),
            'tick_cpu_ms_p50': float(np.percentile(cpu, 50)),
            'tick_cpu_ms_p99': float(np.percentile(cpu, 99)),
            'iteration_ms_p50': float(np.percentile(times, 50) / ITERATIONS),
            'share_full_iterations': float(np.mean(np.asarray(iterations) == ITERATIONS))}


def run(ticks: int = TICKS, variants: Optional[tuple] = None) -> dict:
    """Alternate ticks of the controllers in `variants` (default: all four), each with a car."""
    model = load_car_model(DEFAULT_MODEL)
    track = Track(load_track_spec(DEFAULT_TRACK))
    variants = variants or (
        ('fast', TrackMPC, CONFIG), ('autograd', TrackMPC, replace(CONFIG, fast=False)),
        ('reference', ReferenceMPC, replace(CONFIG, fast=False)),
        ('fast_split_two_threads', TrackMPC, replace(CONFIG, line_search_threads=2)))
    controllers = {name: cls(model, track, cfg, LineSearchOptimizer(OptimizerConfig(
        iterations=ITERATIONS, candidates=512, stop_early=False)))
        for name, cls, cfg in variants}
    for mpc in controllers.values():
        mpc.warm_up()
    start = np.zeros((1, 6))
    start[0, :3] = track.pose_at(0.0)
    states = {name: start.copy() for name in controllers}
    log = {name: ([], [], []) for name in controllers}
    params = CarParams(dt=1.0 / 240.0)
    gap = 0.0
    for tick in range(ticks):
        for name, mpc in controllers.items():
            cpu = time.process_time()
            result = mpc.solve(states[name][0])
            log[name][1].append((time.process_time() - cpu) * 1e3)
            log[name][0].append(result.seconds * 1e3)
            log[name][2].append(result.iterations)
            states[name] = simulate(states[name], result.command[None, None], params,
                                    model.h)[:, -1]
        if tick % 20 == 0 and 'reference' in controllers:  # same function, same controls
            u = (controllers['fast'].warm_start() + 0.1 * torch.randn(64, CONFIG.horizon, 2)
                 ).clamp(-1.0, 1.0)
            state = states['fast'][0]
            with torch.no_grad():
                costs = [controllers['fast'].fast_closures(state)[0](u).clone()]
                costs += [mpc.cost_closure(state)(u) for mpc in controllers.values()]
            spread = costs[-1].max() - costs[-1].min()
            gap = max(gap, *(float((c - costs[-1]).abs().max() / spread) for c in costs))
    result = {name: _stats(*log[name]) for name in controllers}
    if 'reference' in controllers:
        result['max_cost_difference_over_cost_spread'] = gap
    return result


def main() -> None:
    """Measure the shipped and the reference MPC in one run and write the JSON."""
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    timing = run()
    torch.set_num_threads(2)
    two = run(TICKS // 2, (('fast', TrackMPC, CONFIG),
                           ('reference', ReferenceMPC, replace(CONFIG, fast=False))))
    timing['fast_two_threads'], timing['reference_two_threads'] = two['fast'], two['reference']
    torch.set_num_threads(1)
    fast, reference = timing['fast'], timing['reference']
    split = timing['fast_split_two_threads']
    result = {
        'threads': 1, 'horizon': 20, 'candidates': 512, 'iterations_per_tick': ITERATIONS,
        'compiled': False, 'load_average_1min_at_start': load,
        'load_average_1min_at_end': os.getloadavg()[0],
        'seconds': time.perf_counter() - started, **timing,
        'speedup_p50': reference['tick_ms_p50'] / fast['tick_ms_p50'],
        'speedup_p99': reference['tick_ms_p99'] / fast['tick_ms_p99'],
        'speedup_over_autograd_p50': timing['autograd']['tick_ms_p50'] / fast['tick_ms_p50'],
        'split_speedup_over_two_thread_reference_p50':
            timing['reference_two_threads']['tick_ms_p50'] / split['tick_ms_p50'],
        'split_speedup_over_two_thread_reference_p99':
            timing['reference_two_threads']['tick_ms_p99'] / split['tick_ms_p99'],
        'meets_50ms_p99': fast['tick_ms_p99'] <= 50.0,
        'meets_50ms_p99_split_two_threads': split['tick_ms_p99'] <= 50.0,
        'meets_50ms_p99_two_threads': timing['fast_two_threads']['tick_ms_p99'] <= 50.0,
        'issue_reference_iteration_ms': ISSUE_REFERENCE_ITERATION_MS,
        'tick_ms_p99_at_issue_reference_speed': {
            name: timing[name]['tick_ms_p99'] * ISSUE_REFERENCE_ITERATION_MS
            / timing[baseline]['iteration_ms_p50']
            for name, baseline in (('fast', 'reference'),
                                   ('fast_split_two_threads', 'reference_two_threads'),
                                   ('fast_two_threads', 'reference_two_threads'))},
        'note': 'early stopping is off so every tick runs all iterations; tick and iteration '
                'times include the 512-candidate line search; ticks of the controllers in one '
                'run alternate; fast_split_two_threads: the shipped controller with '
                'line_search_threads 2 (1 intra-op thread each), in the main run; '
                'fast_two_threads and reference_two_threads: 2 intra-op threads, a second run; '
                'tick_ms_p99_at_issue_reference_speed: p99 scaled by the eager reference speed '
                'the issue states over ours with the same threads (p99 x 28 ms / our reference '
                'ms per iteration)'}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == '__main__':
    main()
