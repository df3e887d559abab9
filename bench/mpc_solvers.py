"""
MPC solvers on the same learned model: seed 003's line search against IPOPT (CasADi).

1. Open loop, same states: 50 states of a lap driven by the shipped controller, each with the
   warm start that controller had there (its previous plan shifted). Every solver starts from
   it; solvers alternate order per state so background load hits all alike. Time p50/p99 and
   the cost of each returned plan under one common cost function (the MPC's autograd-path
   cost, clipped to the limits), also relative to the line search's on the same state.
2. Closed loop: two laps per solver in the simulator with car_mpc's 50 ms budget enforced
   (a tick over budget sends the brake, as the node does): lap time, max lateral error,
   budget misses; idle, then beside a CPU-heavy process (a busy loop on one core).
Writes bench/results/mpc_solvers.json; docs/results_car.md states the numbers.
"""
import json
import os
from pathlib import Path
import subprocess
import sys
import time

import numpy as np
from robot_dynamics_learning.control.demo_lap import build_mpc, drive_laps
from robot_dynamics_learning.control.optimizer import make_optimizer
import torch

RESULTS = Path(__file__).resolve().parent / 'results' / 'mpc_solvers.json'
# (name, solver, iterations per tick); the line search keeps its 512 candidates.
SOLVERS = (('line_search_3x512', 'line_search', 3), ('ipopt_3', 'ipopt', 3),
           ('ipopt_5', 'ipopt', 5), ('ipopt_10', 'ipopt', 10))
STATES = 50
BUDGET_S = 0.05   # car_mpc's budget_s (config/car.yaml)


def open_loop(states: int = STATES) -> dict:
    """Solve the same states from the same warm starts with every solver."""
    lap = drive_laps(laps=1.0)
    shipped = build_mpc()
    visited = lap['arrays']['state']   # one true state per MPC tick
    picks = np.linspace(5, len(visited) - 1, states).astype(int)
    optimizers = {name: make_optimizer(solver, shipped.config.horizon, iterations,
                                       stop_early=False) for name, solver, iterations in SOLVERS}
    times = {name: [] for name in optimizers}
    costs = {name: [] for name in optimizers}
    order = list(optimizers)
    for k, index in enumerate(picks):
        for previous in visited[max(0, index - 3):index]:   # the controller's own warm start
            shipped.solve(previous)
        state = visited[index]
        start = shipped.warm_start()
        cost_fn, grad_fn, _ = shipped.fast_closures(state)
        common = shipped.cost_closure(state)
        for name in order[k % len(order):] + order[:k % len(order)]:
            began = time.perf_counter()
            plan, _ = optimizers[name].optimize(cost_fn, start, grad_fn=grad_fn,
                                                bounds=(shipped.lower, shipped.upper))
            times[name].append(time.perf_counter() - began)
            with torch.no_grad():
                clipped = torch.clamp(plan, shipped.lower, shipped.upper)
                costs[name].append(float(common(clipped.unsqueeze(0))[0]))
    base_times = np.asarray(times['line_search_3x512'])
    base_costs = np.asarray(costs['line_search_3x512'])
    result = {}
    for name in optimizers:
        t, c = np.asarray(times[name]), np.asarray(costs[name])
        result[name] = {
            'ms_p50': float(np.percentile(t, 50) * 1e3),
            'ms_p99': float(np.percentile(t, 99) * 1e3),
            'time_vs_line_search_p50': float(np.median(t / base_times)),
            'cost_p50': float(np.median(c)),
            'cost_minus_line_search_p50': float(np.median(c - base_costs)),
            'cost_minus_line_search_mean': float(np.mean(c - base_costs)),
            'share_states_better': float(np.mean(c < base_costs - 1e-6))}
    return result


def closed_loop(busy: bool) -> dict:
    """Two laps per solver with the 50 ms budget enforced; optionally beside a busy loop."""
    hog = (subprocess.Popen([sys.executable, '-c', 'while True: pass'])
           if busy else None)
    try:
        result = {}
        for name, solver, iterations in SOLVERS:
            lap = drive_laps(laps=2.0, solver=solver, iterations=iterations,
                             budget_s=BUDGET_S, max_time_s=40.0)
            result[name] = {key: lap[key] for key in (
                'laps', 'completed', 'lap_time_s', 'max_lateral_m', 'left_track',
                'budget_misses', 'ticks', 'solve_ms_p50', 'solve_ms_p99')}
        return result
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def main() -> None:
    """Run both comparisons in one process and write the JSON."""
    torch.set_num_threads(1)
    started = time.perf_counter()
    load = os.getloadavg()[0]
    result = {'threads': 1, 'horizon': 20, 'budget_s': BUDGET_S,
              'load_average_1min_at_start': load,
              'open_loop_same_states': open_loop(),
              'closed_loop_idle': closed_loop(busy=False),
              'closed_loop_beside_busy_process': closed_loop(busy=True)}
    result['load_average_1min_at_end'] = os.getloadavg()[0]
    result['seconds'] = time.perf_counter() - started
    result['note'] = ('IPOPT (CasADi 3.8, L-BFGS Hessian, box constraints) optimises the same '
                      'torch cost closures as the line search through CasADi callbacks; '
                      'costs of every plan under the MPC autograd-path cost; closed loop: '
                      'ideal loop except that a tick over budget_s sends the brake')
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == '__main__':
    main()
