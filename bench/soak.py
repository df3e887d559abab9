"""
Soak test: arm_sim at 1 kHz into dynamics_learner over DDS for a long run (`make soak`).

Every `period` seconds it records the resident memory of arm_sim and of dynamics_learner
(each with its child processes: the arm physics, the trainer) and the counts so far:
joint states seen on /joint_states, messages the learner accepted and rejected (its
/diagnostics), and predictions it published. Writes bench/results/soak.json. Not in CI: the
default is 10 minutes on an otherwise idle machine; `--seconds 60` is the short check.
"""
import argparse
import json
import os
from pathlib import Path
import sys
import time
from typing import Dict, List

from bench.continual import tree_rss
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / 'bench' / 'results' / 'soak.json'
SCRATCH = ROOT / 'bench' / 'results' / 'quick' / 'soak'


def growth(samples: List[Dict], key: str) -> Dict[str, float]:
    """RSS of `key` after the first sixth of the run (warm-up) to the end, and the slope."""
    t = np.array([s['t_s'] for s in samples])
    rss = np.array([s[key] for s in samples])
    settled = slice(len(rss) // 6, None)
    slope = np.polyfit(t[settled], rss[settled], 1)[0] if rss[settled].size > 2 else 0.0
    return {'start_mb': round(float(rss[settled][0]), 1), 'end_mb': round(float(rss[-1]), 1),
            'max_mb': round(float(rss.max()), 1),
            'slope_mb_per_min': round(float(slope) * 60.0, 3)}


def run(seconds: float, period: float, model: str) -> dict:
    """Run the soak; return the result dict (also what soak.json holds)."""
    sys.path.insert(0, str(ROOT / 'test'))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import qos_profile_sensor_data, QoSProfile
    from ros_util import start_node, stop_node, TestNode, wait_for
    from sensor_msgs.msg import JointState

    SCRATCH.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    learner = start_node('dynamics_learner', {'model': model, 'diagnostics_period_s': 1.0},
                         log_path=SCRATCH / 'learner.log')
    sim = None
    counts = {'joint_states': 0, 'predictions': 0}
    diagnostics: Dict[str, str] = {}
    samples: List[Dict] = []
    try:
        with TestNode('soak_probe') as probe:
            def count(key: str):
                def callback(_: bytes) -> None:
                    counts[key] += 1
                return callback

            def on_diag(msg: DiagnosticArray) -> None:
                for status in msg.status:
                    if status.name.startswith('dynamics_learner'):
                        diagnostics.update({kv.key: kv.value for kv in status.values})
            # Raw (undecoded) and deep, so the counting probe neither loads the CPU nor drops.
            qos = QoSProfile(depth=1000, reliability=qos_profile_sensor_data.reliability,
                             durability=qos_profile_sensor_data.durability)
            probe.node.create_subscription(JointState, '/joint_states', count('joint_states'),
                                           qos, raw=True)
            probe.node.create_subscription(JointState, '/dynamics_learner/predicted_torques',
                                           count('predictions'), qos, raw=True)
            probe.node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
            if not wait_for(lambda: diagnostics, 120):
                raise RuntimeError('dynamics_learner did not start: see '
                                   f'{SCRATCH / "learner.log"}')
            sim = start_node('arm_sim', {'rate_hz': 1000.0, 'real_time_factor': 1.0},
                             log_path=SCRATCH / 'arm_sim.log')
            processes = {'arm_sim': psutil.Process(sim.pid),
                         'dynamics_learner': psutil.Process(learner.pid)}
            started = time.monotonic()
            deadline = started + seconds
            next_sample = started
            while time.monotonic() < deadline + 1e-3:
                time.sleep(max(0.0, next_sample - time.monotonic()))
                if sim.poll() is not None or learner.poll() is not None:
                    raise RuntimeError('a node stopped during the soak: see the logs in '
                                       f'{SCRATCH}')
                samples.append({
                    't_s': round(time.monotonic() - started, 2),
                    **{f'rss_mb_{name}': round(tree_rss(p) / 2 ** 20, 1)
                       for name, p in processes.items()},
                    'joint_states_seen': counts['joint_states'],
                    'messages_accepted': int(diagnostics.get('messages_accepted', 0)),
                    'predictions_published': counts['predictions'],
                    'train_steps': int(diagnostics.get('train_steps', 0))})
                next_sample += period
    finally:
        if sim is not None:
            stop_node(sim)
        stop_node(learner)
    last = samples[-1]
    span = last['t_s'] - samples[0]['t_s']
    rejected = {key[len('messages_'):]: int(value) for key, value in diagnostics.items()
                if key.startswith('messages_') and key != 'messages_accepted'}
    return {
        'seconds': seconds, 'period_s': period, 'model': model, 'rate_hz': 1000.0,
        'joint_states_seen': last['joint_states_seen'],
        'messages_accepted': last['messages_accepted'],
        'messages_rejected': rejected,
        'predictions_published': last['predictions_published'],
        'accepted_per_s': round((last['messages_accepted'] - samples[0]['messages_accepted'])
                                / span, 1) if span > 0 else None,
        'prediction_share': round(last['predictions_published'] / last['messages_accepted'],
                                  4) if last['messages_accepted'] else None,
        'train_steps': last['train_steps'],
        'rss_dynamics_learner': growth(samples, 'rss_mb_dynamics_learner'),
        'rss_arm_sim': growth(samples, 'rss_mb_arm_sim'),
        'load_average_start': load_start, 'load_average_end': os.getloadavg(),
        'cpu_count': os.cpu_count(), 'samples': samples,
    }


def main(argv=None) -> None:
    """Parse arguments, run the soak, write the JSON and print its summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seconds', type=float, default=600.0, help='duration (600)')
    parser.add_argument('--period', type=float, default=10.0,
                        help='seconds between samples (10)')
    parser.add_argument('--model', default='lstm', help='dynamics_learner model (lstm)')
    parser.add_argument('--out', type=Path, default=OUT, help=f'output JSON ({OUT})')
    args = parser.parse_args(argv)
    result = run(args.seconds, args.period, args.model)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, allow_nan=False) + '\n')
    summary = {k: v for k, v in result.items() if k != 'samples'}
    print(json.dumps(summary, indent=1))


if __name__ == '__main__':
    main()
