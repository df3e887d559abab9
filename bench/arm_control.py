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
  why both differ from config/learner.yaml).
Tracking RMSE (rad, all joints) over one reference period before the change (60-70 s, after
60 s of learning) and 10-20 s after it (80-90 s); the learner's prequential nMSE (5000-sample
window) at 20k samples of MuJoCo data.
Live part: mujoco_arm and arm_controller (URDF feed-forward) as processes over DDS for
`--live` seconds, with default scheduling and again with `realtime_priority` (SCHED_FIFO);
how late mujoco_arm published each step against its 1 ms schedule (its /diagnostics:
percentiles over disjoint 5 s windows) and the inter-arrival jitter seen by a probe node.

    .venv/bin/python -m bench.arm_control [--seconds 90] [--live 20] [--realtime-priority 50]

Writes bench/results/arm_control.json and docs/img/arm_control.png. The load average is saved
with the results: timing on a shared 2-core machine is pessimistic; ratios from one run count.
"""
import argparse
import functools
import json
import os
from pathlib import Path
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np
from robot_dynamics_learning.control.arm_feedforward import (ArmController,
                                                             ArmControllerConfig,
                                                             LearnedFeedforward,
                                                             no_feedforward,
                                                             RigidBodyFeedforward)
from robot_dynamics_learning.learning.buffer import BufferConfig
from robot_dynamics_learning.learning.checkpoint import CheckpointDirectory, save_to_directory
from robot_dynamics_learning.learning.continual import (ContinualLearner,
                                                        InverseDynamicsStream, LearnerConfig,
                                                        TrainerConfig)
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.resources import resource
from robot_dynamics_learning.signals.causal import CausalDifferentiator
from robot_dynamics_learning.sim.mujoco_arm import MujocoArm, MujocoArmConfig
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'bench' / 'results'
IMAGES = ROOT / 'docs' / 'img'
RATE = 1000
PERIOD_S = 10.0   # one period of the excitation reference
MODES = ('none', 'urdf', 'learned')
LABELS = {'none': 'PD only', 'urdf': 'PD + URDF feed-forward',
          'learned': 'PD + learned feed-forward (hybrid)'}


def closed_loop(mode: str, seconds: float, change_s: float, payload_kg: float,
                checkpoint_period_s: float, folder: Path,
                payload_forgetting: float = 0.9999) -> Dict[str, object]:
    """Run one controller on the MuJoCo arm; return per-step errors and learner numbers."""
    urdf = resource('urdf/panda.urdf')
    sim = MujocoArm(MujocoArmConfig())
    names = sim.joint_names
    n = sim.n_dof
    rigid_body = RigidBodyFeedforward(urdf)
    learned = LearnedFeedforward(folder, names, fallback=rigid_body,
                                 differentiator=CausalDifferentiator(n, window=21))
    feedforward = {'none': no_feedforward, 'urdf': rigid_body, 'learned': learned}[mode]
    lower, upper = sim.model.jnt_range.T
    controller = ArmController(ArmControllerConfig(), feedforward, lower, upper,
                               sim.effort_limit)
    sim.reset(sim.model.jnt_range.mean(axis=1))
    learner, stream = None, None
    if mode == 'learned':
        torch.manual_seed(0)
        model = build_model('hybrid', {'urdf': str(urdf), 'hidden_size': 32, 'num_layers': 1,
                                       'payload_forgetting': payload_forgetting}, 3 * n, n, n)
        config = LearnerConfig(BufferConfig(), TrainerConfig(updates_per_sample=0.05))
        learner = ContinualLearner(
            model, 3 * n, n, n, config, np.random.default_rng(0),
            save=functools.partial(save_to_directory, CheckpointDirectory(folder), names))
        stream = InverseDynamicsStream(n, CausalDifferentiator(n, window=21))
    steps = int(seconds * RATE)
    errors = np.empty((steps, n))
    nmse_at: Dict[int, float] = {}
    started = time.perf_counter()
    state = sim.state()
    for k in range(steps):
        if k == int(change_s * RATE):
            sim.set_payload(payload_kg)
        stamp = int(round(state.time * 1e9)) + 1   # the node's stamps are never 0
        sim.command(controller.on_state(stamp, stamp, state.position, state.velocity))
        errors[k] = controller.last_error
        state = sim.step()
        if learner is None:
            continue
        features = stream.sample(state.time, state.position, state.velocity, state.effort)
        if features is not None:
            learner.observe(state.time, *features)
            learner.trainer.train_pending()
            if learner.buffer.total in (5000, 10000, 20000, 40000, 60000):
                nmse_at[learner.buffer.total] = learner.prequential.nmse()
        if (k + 1) % int(checkpoint_period_s * RATE) == 0:
            learner.trainer.checkpoint_now()
        if (k + 1) % RATE == 0:
            learned.poll()
    result = {'errors': errors, 'seconds': time.perf_counter() - started,
              'counts': {**controller.counts, **{f'sim_{k}': v for k, v in sim.counts.items()}}}
    if learner is not None:
        result.update(nmse_at=nmse_at, train_steps=learner.trainer.steps,
                      rejected_steps=learner.trainer.rejected_steps,
                      checkpoint_loads=learned.loads, urdf_fallback_calls=learned.fallback_calls,
                      payload_estimate_kg=float(learner.physics.state()[0]))
    return result


def rmse(errors: np.ndarray, start_s: float, end_s: float) -> float:
    """Return the tracking RMSE (rad) over all joints in [start_s, end_s)."""
    return float(np.sqrt(np.mean(errors[int(start_s * RATE):int(end_s * RATE)] ** 2)))


def trailing_rmse(errors: np.ndarray, window: int) -> np.ndarray:
    """Return the RMSE over the trailing `window` steps at every step (NaN before)."""
    squared = np.concatenate([[0.0], np.cumsum(np.mean(errors ** 2, axis=1))])
    out = np.full(errors.shape[0], np.nan)
    out[window - 1:] = np.sqrt((squared[window:] - squared[:-window]) / window)
    return out


def plot(curves: Dict[str, np.ndarray], change_s: float, path: Path) -> None:
    """Trailing one-period tracking RMSE of each controller over time, payload marked."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(9, 4.5))
    for mode, curve in curves.items():
        t = np.arange(1, curve.size + 1) / RATE
        axis.semilogy(t, curve * 1e3, label=LABELS[mode], lw=1.2)
    axis.axvline(change_s, color='red', ls='--', lw=1, label='+2 kg payload')
    axis.set_xlabel('time [s] (MuJoCo, 1 kHz; learning from t = 0)')
    axis.set_ylabel('tracking RMSE over the last 1 s [mrad]')
    axis.set_title('Panda on MuJoCo (friction, damping, armature unknown to the URDF)')
    axis.legend(fontsize=8)
    axis.grid(True, which='both', alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def offline(seconds: float, change_s: float, checkpoint_period_s: float,
            payload_forgetting: float) -> dict:
    """Run the three controllers; return the acceptance numbers."""
    torch.set_num_threads(1)
    runs, curves = {}, {}
    for mode in MODES:
        print(f'closed loop, {LABELS[mode]}: {seconds:.0f} s ...', flush=True)
        with tempfile.TemporaryDirectory() as folder:
            run = closed_loop(mode, seconds, change_s, 2.0, checkpoint_period_s, Path(folder),
                              payload_forgetting)
        errors = run.pop('errors')
        curves[mode] = trailing_rmse(errors, RATE)
        run.update(rmse_before_change_rad=rmse(errors, change_s - PERIOD_S, change_s),
                   rmse_10_20s_after_change_rad=rmse(errors, change_s + PERIOD_S,
                                                     change_s + 2 * PERIOD_S),
                   rmse_first_period_after_change_rad=rmse(errors, change_s,
                                                           change_s + PERIOD_S))
        runs[mode] = run
        print(json.dumps({k: v for k, v in run.items() if k != 'counts'}, default=str),
              flush=True)
    plot(curves, change_s, IMAGES / 'arm_control.png')
    before = {mode: runs[mode]['rmse_before_change_rad'] for mode in MODES}
    learned = runs['learned']
    summary = {
        'pd_over_learned_before_change': before['none'] / before['learned'],
        'urdf_over_learned_before_change': before['urdf'] / before['learned'],
        'learned_recovery_ratio_10_20s_after_change':
            learned['rmse_10_20s_after_change_rad'] / before['learned'],
        'hybrid_prequential_nmse_at_20k': learned['nmse_at'].get(20000),
    }
    return {'config': {'seconds': seconds, 'payload_change_s': change_s, 'payload_kg': 2.0,
                       'checkpoint_period_s': checkpoint_period_s,
                       'world': vars(MujocoArmConfig()), 'controller': {
                           'kp': ArmControllerConfig().kp, 'kd': ArmControllerConfig().kd},
                       'learner': 'hybrid, config/learner.yaml settings, updates_per_sample '
                                  '0.05, in the loop (ContinualLearner.train_pending)',
                       'payload_forgetting': payload_forgetting},
            'runs': runs, 'summary': summary}


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
    parser.add_argument('--live', type=float, default=20.0, help='live seconds (0: skip)')
    parser.add_argument('--realtime-priority', type=int, default=50, help='a second live run '
                        'with the nodes under SCHED_FIFO at this priority (0: skip)')
    parser.add_argument('--live-only', action='store_true', help='rerun the live part, keep '
                        'the offline results of bench/results/arm_control.json')
    args = parser.parse_args(argv)
    path = RESULTS / 'arm_control.json'
    results = json.loads(path.read_text()) if args.live_only else {}
    results['load_average_at_start'] = os.getloadavg()[0]
    if args.live:
        results['live'] = live(args.live)
        print(json.dumps(results['live'], indent=1), flush=True)
    if args.live and args.realtime_priority:
        results['live_realtime'] = live(args.live, args.realtime_priority)
        print(json.dumps(results['live_realtime'], indent=1), flush=True)
    if not args.live_only:
        results.update(offline(args.seconds, args.change, args.checkpoint_period,
                               args.payload_forgetting))
    print(json.dumps(results['summary'], indent=1))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str))
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
