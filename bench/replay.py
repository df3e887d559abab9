"""
`rdl replay` speed: a 100k-message 1 kHz JointState bag, LSTM at the node's default settings.

Target (issue 19): at least as fast as real time (100 s of bag in <= 100 s) on one core.
The bag is 100 s of the simulated 7-DoF arm (sim/arm.py, Panda URDF with friction,
elasticity and noise) written as MCAP. Measured in the same run: reading the bag through the
node's parser (`read_joint_stream`), the causal features, and the LSTM's predict-then-train
loop (config/learner.yaml settings: 0.05 updates per sample, batches of 128 windows x 32
steps), with the process pinned to one core and one torch thread. Pure prequential (no
held-out blocks), as the node learns. Writes bench/results/replay.json.
"""
import json
import os
from pathlib import Path
import platform
import tempfile
import time

from robot_dynamics_learning.data.bag_io import write_joint_trajectories
from robot_dynamics_learning.learning import replay, report
from robot_dynamics_learning.sim.arm import ArmConfig
from robot_dynamics_learning.sim.cli import simulate_arm

SECONDS = 100.0
RESULTS = Path(__file__).resolve().parent / 'results' / 'replay.json'


def main() -> None:
    """Write the bag, replay it with the LSTM, report the ratio to real time."""
    if hasattr(os, 'sched_setaffinity'):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    trajectory, _ = simulate_arm(SECONDS, [], ArmConfig(seed=0))
    params = replay.load_learner_params()
    params.update(model='lstm', model_config={})
    with tempfile.TemporaryDirectory() as folder:
        bag = Path(folder) / 'arm'
        write_joint_trajectories(bag, [trajectory], 'mcap')
        started = time.perf_counter()
        stream = replay.read_joint_stream(bag)
        read_s = time.perf_counter() - started
        result = replay.replay(stream, ['lstm'], None, params, replay.Holdout('none'), seed=0)
        total_s = time.perf_counter() - started
    lstm = result.runs[-1]
    metrics = report.compute_metrics(result)['models']['lstm']
    out = {
        'messages': len(stream), 'bag_seconds': stream.duration_s, 'rate_hz': stream.rate_hz,
        'read_s': read_s, 'features_and_baselines_s': total_s - read_s - lstm.wall_s,
        'lstm_loop_s': lstm.wall_s, 'lstm_train_s': lstm.train_s, 'total_s': total_s,
        'realtime_factor_total': stream.duration_s / total_s,
        'realtime_factor_lstm_loop': stream.duration_s / lstm.wall_s,
        'ms_per_sample_lstm_loop': lstm.wall_s / len(stream) * 1e3,
        'train_steps': metrics['train_steps'], 'latency_ms': metrics['latency_ms'],
        'prequential_nmse': metrics['prequential']['nmse'],
        'learner_params': {k: params[k] for k in ('updates_per_sample', 'batch_size', 'window',
                                                  'warmup_samples', 'torch_threads')},
        'cores': 1, 'load_average_1min_after': os.getloadavg()[0],
        'machine': platform.processor() or platform.machine(),
        'cpus_on_machine': os.cpu_count()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1))
    print(f"replay: {out['messages']} messages ({out['bag_seconds']:.1f} s) in "
          f"{total_s:.1f} s on one core = {out['realtime_factor_total']:.2f}x real time "
          f'(read {read_s:.1f} s, LSTM loop {lstm.wall_s:.1f} s of which training '
          f"{lstm.train_s:.1f} s, {out['train_steps']} updates); load average "
          f"{out['load_average_1min_after']:.1f}")


if __name__ == '__main__':
    main()
