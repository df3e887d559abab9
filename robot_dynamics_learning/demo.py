"""
`make demo`: a simulated arm learned online by real ROS 2 nodes, with a payload change.

1. arm_sim (the 7-DoF Franka Panda with friction, elastic joints and sensor noise, 1 kHz) and
   dynamics_learner (LSTM, trained continually in its own thread) run as separate processes
   talking over DDS on localhost, for --duration seconds (default 60).
2. Halfway through, the simulator gets a payload of --payload kg at the flange; the learner
   is not told. A live line shows the message rate and the prequential error (each sample
   predicted before it is trained on).
3. At the end: out/demo/continual_demo.png (predicted vs measured torque, the error over
   time, the payload change marked) and a short summary; then the RC-car lap of
   `robot_dynamics_learning.control.demo_lap.run(out_dir)` if that module is present.

The nodes are started as `python -m robot_dynamics_learning.nodes.<name>` with the same
parameters the launch files pass (launch/arm_sim.launch.py). This module imports no rclpy.
"""
import argparse
import importlib.util
import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

import numpy as np
from robot_dynamics_learning.processes import ros_args, start_node_process, stop_process

LINE = re.compile(r'accepted (\d+).*?samples (\d+), steps (\d+), loss (\S+), prequential nMSE '
                  r'(\S+), latency p50 (\S+) ms p99 (\S+) ms')
PAYLOAD = re.compile(r'scripted payload change to (\S+) kg at (\S+) s')
ORIGIN = re.compile(r'stamp origin (\d+) ns')


def _follow(process: subprocess.Popen, log: Path, lines: List[str]) -> threading.Thread:
    """Copy a process's output to `log` and `lines` in a background thread."""
    def run() -> None:
        with open(log, 'w') as stream:
            for line in process.stdout:
                stream.write(line)
                stream.flush()
                lines.append(line)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _plot(record: Dict[str, np.ndarray], change_time: Optional[float], payload: float,
          path: Path, model: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    t = record['time'] - record['time'][0]
    change = None if change_time is None else change_time - record['time'][0]
    target, prediction = record['target'], record['prediction']
    joints = np.argsort(target.std(axis=0))[::-1][:2]
    figure, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for axis, j in zip(axes[:2], joints):
        axis.plot(t, target[:, j], lw=0.6, label='measured')
        axis.plot(t, prediction[:, j], lw=0.6, label='predicted (before training on it)')
        axis.set_ylabel(f'{record["names"][j]} torque [N m]')
        axis.legend(loc='upper right', fontsize=8)
    axes[2].semilogy(t, np.maximum(record['nmse'], 1e-4),
                     label='prequential nMSE (last 5000 accepted samples)')
    axes[2].axhline(0.03, color='gray', ls=':', label='0.03')
    axes[2].set_ylabel('nMSE')
    axes[2].set_xlabel('time [s]')
    for axis in axes:
        if change is not None:
            axis.axvline(change, color='red', ls='--', lw=1)
    if change is not None:
        axes[2].text(change, axes[2].get_ylim()[1], f' +{payload:g} kg payload', color='red',
                     va='top')
    axes[2].legend(loc='upper right', fontsize=8)
    figure.suptitle(f'dynamics_learner on arm_sim over ROS 2: online {model} inverse dynamics')
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _summary(record: Dict[str, np.ndarray], change_time: Optional[float]) -> List[str]:
    t, nmse = record['time'], record['nmse']
    lines = [f'samples scored: {len(t)} over {t[-1] - t[0]:.1f} s']
    reached = np.nonzero(nmse <= 0.03)[0]
    lines.append('prequential nMSE <= 0.03 first after ' + (
        f'{reached[0]} samples' if reached.size else 'never (run longer or see docs)'))
    if change_time is not None:
        before = nmse[t < change_time]
        after = t >= change_time
        if before.size:
            level = before[-1]
            lines.append(f'nMSE just before the payload change: {level:.4f}')
            peak = nmse[after].max() if after.any() else float('nan')
            back = np.nonzero(after & (nmse <= 1.2 * level))[0]
            back = [i for i in back if t[i] > change_time + 1.0]
            lines.append(f'after it: peak {peak:.4f}, ' + (
                f'back within 1.2x after {t[back[0]] - change_time:.1f} s' if back
                else 'not back within 1.2x in this run'))
    lines.append(f'final nMSE: {nmse[-1]:.4f}')
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    """Run simulator and learner over DDS, show live progress, plot and summarise."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--out', type=Path, default=Path('out/demo'), help='output folder')
    parser.add_argument('--duration', type=float, default=60.0, help='seconds of simulation')
    parser.add_argument('--payload', type=float, default=2.0, help='payload added halfway (kg)')
    parser.add_argument('--model', default='hybrid',
                        help='learner model type (hybrid: URDF + online payload + LSTM)')
    parser.add_argument('--urdf', default='', help="arm URDF ('' = urdf/panda.urdf)")
    parser.add_argument('--no-lap', action='store_true', help='skip the RC-car lap')
    args = parser.parse_args(argv)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    args.out.mkdir(parents=True, exist_ok=True)
    record_path = args.out / 'continual_record.npz'
    record_path.unlink(missing_ok=True)
    shutil.rmtree(args.out / 'checkpoints', ignore_errors=True)
    started = time.monotonic()
    print(f'[1] starting arm_sim (1 kHz, +{args.payload:g} kg at {args.duration / 2:.0f} s) and '
          f'dynamics_learner ({args.model}) over DDS', flush=True)
    learner_lines: List[str] = []
    sim_lines: List[str] = []
    learner = start_node_process('dynamics_learner', ros_args({
        'model': args.model, 'urdf': args.urdf, 'record_path': str(record_path),
        'checkpoint_dir': str(args.out / 'checkpoints'), 'resume': False}),
        stdout=subprocess.PIPE)
    followers = [_follow(learner, args.out / 'learner.log', learner_lines)]
    time.sleep(3.0)   # let the learner subscribe before the simulator starts
    sim = start_node_process('arm_sim', ros_args({
        'duration_s': args.duration, 'urdf': args.urdf,
        'payload_schedule': [args.duration / 2, args.payload]}), stdout=subprocess.PIPE)
    followers.append(_follow(sim, args.out / 'arm_sim.log', sim_lines))
    print('[2] live: wall time | messages/s | samples | updates | prequential nMSE | '
          'callback latency p50/p99', flush=True)
    shown, last_accepted, last_time = 0, 0, time.monotonic()
    deadline = time.monotonic() + args.duration + 30.0
    quiet_since = None  # arm_sim stays up after its last message: stop when the stream ends
    while sim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        for line in learner_lines[shown:]:
            match = LINE.search(line)
            if match:
                accepted = int(match.group(1))
                now = time.monotonic()
                if accepted > last_accepted or accepted == 0:
                    quiet_since = None
                elif quiet_since is None:
                    quiet_since = now
                rate = (accepted - last_accepted) / max(now - last_time, 1e-3)
                last_accepted, last_time = accepted, now
                print(f'    {now - started:6.1f} s | {rate:6.0f} /s | {match.group(2):>7} | '
                      f'{match.group(3):>6} | {float(match.group(5)):10.4f} | '
                      f'{match.group(6)}/{match.group(7)} ms', flush=True)
        shown = len(learner_lines)
        if quiet_since is not None and time.monotonic() - quiet_since > 2.0:
            break
    stop_process(sim)
    stop_process(learner)
    for follower in followers:
        follower.join(timeout=5)
    changes = [match for line in sim_lines if (match := PAYLOAD.search(line))]
    if not record_path.exists():
        print(f'no record written; see {args.out / "learner.log"}')
        return 1
    record = dict(np.load(record_path))
    # Simulated seconds -> stamps: the simulator stamps simulated time t as origin + t.
    origins = [int(m.group(1)) for line in sim_lines if (m := ORIGIN.search(line))]
    change_time = (origins[0] * 1e-9 + float(changes[0].group(2))
                   if changes and origins else None)
    png = args.out / 'continual_demo.png'
    _plot(record, change_time, args.payload, png, args.model)
    print('[3] summary')
    for line in _summary(record, change_time):
        print(f'    {line}')
    print(f'    figure: {png}; logs: {args.out}/learner.log, arm_sim.log '
          f'({time.monotonic() - started:.0f} s)')
    if not args.no_lap and importlib.util.find_spec(
            'robot_dynamics_learning.control.demo_lap') is not None:
        from robot_dynamics_learning.control import demo_lap
        print('[4] RC car: one MPC lap (robot_dynamics_learning.control.demo_lap)', flush=True)
        lap = demo_lap.run(args.out)
        print(f"    {'completed' if lap['completed'] else 'NOT completed'}: "
              f"{lap['laps']:.2f} laps, lap time {lap['lap_time_s']:.2f} s, mean speed "
              f"{lap['mean_speed_mps']:.2f} m/s, max |lateral| {lap['max_lateral_m']:.2f} m of "
              f"{lap['half_width_m']:.2f} m; solve p50 / p99 {lap['solve_ms_p50']:.0f} / "
              f"{lap['solve_ms_p99']:.0f} ms\n    figure: {lap['plot']}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
