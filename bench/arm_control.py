"""
Arm control on MuJoCo: how much a learned model is worth as feed-forward, and 1 kHz timing.

Offline part (ROS-free, deterministic, the code the nodes run): `sim/mujoco_arm.py` with its
default world (joint friction, damping and armature the URDF does not have) follows the
excitation reference (10 s period) under `control/arm_feedforward.py`, for 90 s with +2 kg at
the flange from 70 s, three times:
- PD only; URDF feed-forward (RNEA of urdf/panda.urdf);
- learned feed-forward: the hybrid learner (`ContinualLearner`, the node's settings from
  config/learner.yaml, training budget 0.05 updates per sample run in the loop) learns from
  the arm's joint states while the controller uses its newest checkpoint (written every
  `--checkpoint-period` (1 s) of simulated time, polled every second, as the nodes do in
  launch/arm_gazebo.launch.py; the URDF model until the first one), payload RLS forgetting
  `--payload-forgetting` (0.9999, that launch file's model_config; docs/simulation.md says
  why both differ from config/learner.yaml); once per `--seeds` seed, since this closed loop
  amplifies small differences in what the learner saw when.
Tracking RMSE (rad, all joints) over one reference period before the change (60-70 s, after
60 s of learning) and 10-20 s after it (80-90 s); the learner's prequential nMSE (5000-sample
window) at 20k samples of MuJoCo data.
Live part: mujoco_arm and arm_controller (URDF feed-forward) as processes over DDS for
`--live` seconds, with default scheduling and again with `realtime_priority` (SCHED_FIFO);
how late mujoco_arm published each step against its 1 ms schedule (its /diagnostics:
percentiles over disjoint 5 s windows) and the inter-arrival jitter seen by a probe node.

    .venv/bin/python -m bench.arm_control [--seconds 90] [--seeds 0 1 2] [--live 20]
        [--realtime-priority 50]

Writes bench/results/arm_control.json and docs/img/arm_control.png. The load average is saved
with the results: timing on a shared 2-core machine is pessimistic; ratios from one run count.
"""
import argparse
import json
import os
from pathlib import Path
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np
from robot_dynamics_learning.control.arm_demo import (closed_loop, LABELS, MODES, PERIOD_S,
                                                      plot, RATE, rmse, trailing_rmse)
from robot_dynamics_learning.control.arm_feedforward import ArmControllerConfig, GATE_SAMPLES
from robot_dynamics_learning.sim.mujoco_arm import MujocoArmConfig
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'bench' / 'results'
IMAGES = ROOT / 'docs' / 'img'


def offline(seconds: float, change_s: float, checkpoint_period_s: float,
            payload_forgetting: float, seeds: List[int], gate_samples: int) -> dict:
    """Run PD and URDF once, the learned controller once per seed; return the numbers."""
    torch.set_num_threads(1)
    runs, curves, learned_runs = {}, {}, {}
    for mode, seed in [('none', 0), ('urdf', 0)] + [('learned', s) for s in seeds]:
        print(f'closed loop, {LABELS[mode]}, seed {seed}: {seconds:.0f} s ...', flush=True)
        with tempfile.TemporaryDirectory() as folder:
            run = closed_loop(mode, seconds, change_s, 2.0, checkpoint_period_s, Path(folder),
                              payload_forgetting, seed, gate_samples)
        errors = run.pop('errors')
        run.update(rmse_before_change_rad=rmse(errors, change_s - PERIOD_S, change_s),
                   rmse_10_20s_after_change_rad=rmse(errors, change_s + PERIOD_S,
                                                     change_s + 2 * PERIOD_S),
                   rmse_first_period_after_change_rad=rmse(errors, change_s,
                                                           change_s + PERIOD_S))
        print(json.dumps({k: v for k, v in run.items() if k != 'counts'}, default=str),
              flush=True)
        if mode == 'learned':
            learned_runs[seed] = run
        if mode not in runs:   # the plot and the headline: the first seed
            runs[mode] = run
            curves[mode] = trailing_rmse(errors, RATE)
    plot(curves, change_s, IMAGES / 'arm_control.png')
    before = {mode: runs[mode]['rmse_before_change_rad'] for mode in MODES}
    urdf_over_learned = [before['urdf'] / run['rmse_before_change_rad']
                         for run in learned_runs.values()]
    recovery = [run['rmse_10_20s_after_change_rad'] / run['rmse_before_change_rad']
                for run in learned_runs.values()]
    summary = {
        'seeds': seeds,
        'pd_over_learned_before_change': before['none'] / before['learned'],
        'urdf_over_learned_before_change_per_seed': urdf_over_learned,
        'urdf_over_learned_before_change_median': float(np.median(urdf_over_learned)),
        'learned_recovery_ratio_10_20s_after_change_per_seed': recovery,
        'hybrid_prequential_nmse_at_20k': runs['learned']['nmse_at'].get(20000),
    }
    return {'config': {'seconds': seconds, 'payload_change_s': change_s, 'payload_kg': 2.0,
                       'checkpoint_period_s': checkpoint_period_s,
                       'world': vars(MujocoArmConfig()), 'controller': {
                           'kp': ArmControllerConfig().kp, 'kd': ArmControllerConfig().kd},
                       'learner': 'hybrid, config/learner.yaml settings, updates_per_sample '
                                  '0.05, in the loop (ContinualLearner.train_pending)',
                       'payload_forgetting': payload_forgetting,
                       'gate_samples': gate_samples},
            'runs': runs, 'learned_per_seed': {str(k): v for k, v in learned_runs.items()},
            'summary': summary}


def live(seconds: float, realtime_priority: int = 0) -> dict:
    """Run mujoco_arm + arm_controller over DDS; return publish lateness and jitter."""
    sys.path.insert(0, str(ROOT / 'test'))
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import qos_profile_sensor_data, QoSProfile
    from ros_util import start_node, stop_node, TestNode, wait_for
    from sensor_msgs.msg import JointState
    arrivals: List[float] = []
    late: List[Dict[str, float]] = []

    def on_diagnostics(msg: DiagnosticArray) -> None:
        status = msg.status[0]
        values = {kv.key: kv.value for kv in status.values}
        if status.name.endswith('mujoco_arm') and 'publish_late_ms_p99' in values:
            late.append({'received': time.monotonic(), **{
                k: float(values[k]) for k in values if k.startswith('publish_late')}})

    scratch = ROOT / 'out' / 'bench_arm_control'
    scratch.mkdir(parents=True, exist_ok=True)
    with TestNode('bench_probe') as probe:
        qos = QoSProfile(depth=1000, reliability=qos_profile_sensor_data.reliability)
        probe.node.create_subscription(JointState, '/joint_states',
                                       lambda _: arrivals.append(time.monotonic()), qos)
        probe.node.create_subscription(DiagnosticArray, '/diagnostics', on_diagnostics, 100)
        priority = {'realtime_priority': realtime_priority}
        sim = start_node('mujoco_arm', priority, log_path=scratch / 'mujoco_arm.log')
        controller = start_node('arm_controller', {'feedforward': 'urdf', **priority},
                                log_path=scratch / 'arm_controller.log')
        try:
            wait_for(lambda: len(arrivals) > 1000, 60)
            load_start = os.getloadavg()[0]
            first, started = len(arrivals), time.monotonic()
            time.sleep(seconds)
            window = np.diff(np.array(arrivals[first:]))
            load_end = os.getloadavg()[0]
        finally:
            stop_node(controller)
            stop_node(sim)
    # Each status covers the last 5 s: one every 5 s gives disjoint windows of the run.
    windows = [w for w in late if w['received'] >= started + 5.0]
    windows = windows[::5]
    p99 = [w['publish_late_ms_p99'] for w in windows]
    jitter = np.abs(window - 1e-3) * 1e3
    return {'seconds': seconds, 'realtime_priority': realtime_priority,
            'load_average_start_end': [load_start, load_end],
            'messages_per_s_at_probe': float(window.size / seconds),
            'publish_late_ms_p99_per_5s_window': p99,
            'publish_late_ms_p99_median_of_windows': float(np.median(p99)) if p99 else None,
            'publish_late_ms_p50_last_window': windows[-1]['publish_late_ms_p50']
            if windows else None,
            'probe_interarrival_jitter_ms_p50': float(np.percentile(jitter, 50)),
            'probe_interarrival_jitter_ms_p99': float(np.percentile(jitter, 99))}


def main(argv=None) -> None:
    """Run the offline comparison and the live timing; write JSON and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--seconds', type=float, default=90.0)
    parser.add_argument('--change', type=float, default=70.0, help='payload change (s)')
    parser.add_argument('--checkpoint-period', type=float, default=1.0)
    parser.add_argument('--payload-forgetting', type=float, default=0.9999,
                        help="the hybrid's payload RLS forgetting factor (docs/simulation.md)")
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2],
                        help="the learned controller's seeds (weights and sampling)")
    parser.add_argument('--gate-samples', type=int, default=GATE_SAMPLES,
                        help='measured samples a new checkpoint is scored on before the '
                        'controller uses it (0: every checkpoint is used)')
    parser.add_argument('--live', type=float, default=20.0, help='live seconds (0: skip)')
    parser.add_argument('--realtime-priority', type=int, default=50, help='a second live run '
                        'with the nodes under SCHED_FIFO at this priority (0: skip)')
    parser.add_argument('--live-only', action='store_true', help='rerun the live part, keep '
                        'the offline results of bench/results/arm_control.json')
    args = parser.parse_args(argv)
    path = RESULTS / 'arm_control.json'
    # A part not rerun (--live-only, or --live 0) keeps its earlier results.
    keep = (args.live_only or not args.live) and path.exists()
    results = json.loads(path.read_text()) if keep else {}
    results['load_average_at_start'] = os.getloadavg()[0]
    if args.live:
        results['live'] = live(args.live)
        print(json.dumps(results['live'], indent=1), flush=True)
    if args.live and args.realtime_priority:
        results['live_realtime'] = live(args.live, args.realtime_priority)
        print(json.dumps(results['live_realtime'], indent=1), flush=True)
    if not args.live_only:
        results.update(offline(args.seconds, args.change, args.checkpoint_period,
                               args.payload_forgetting, args.seeds, args.gate_samples))
    print(json.dumps(results['summary'], indent=1))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str))
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
