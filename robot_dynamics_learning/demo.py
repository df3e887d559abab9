"""
`make demo`: a simulated arm learned online by real ROS 2 nodes, with a payload change.

The schedule runs on robot time (the stamps of the joint states), not on the wall clock, so
a slow or busy computer shows the same story, only slower:

1. Warm-up: dynamics_learner (hybrid: URDF + online payload + LSTM, trained continually)
   and arm_sim (the 7-DoF Franka Panda with friction, elastic joints and sensor noise) run
   --warmup s of robot time at 1 kHz. Start-up, however long, is not part of any run. The
   demo measures the messages per second the learner scores and the MPC solve time, and
   says in one line what it adapts: a lower publish rate when the computer cannot score
   1 kHz (so the learner sees every sample, close to real time; the learner's settings
   counted in samples are scaled to keep their robot time), fewer line-search candidates
   when a lap's MPC solve would miss the car node's 50 ms budget.
2. The run: a fresh learner (set for the run's rate), then arm_sim publishes --duration s of
   robot time (default 60); from half of it the flange carries --payload kg, and the learner
   is not told. A live line shows robot time, message rate and the prequential error (each
   sample predicted before it is trained on). The run ends when the learner has scored the
   last robot second; a wall-clock guard (--guard-s) ends it earlier and then says what was
   and was not shown.
3. Summary: every target, met or MISSED, with its number; out/demo/continual_demo.png
   (predicted vs measured torque, the error over robot time, the payload change marked).
4. The RC-car lap of `robot_dynamics_learning.control.demo_lap.run` (car_lap.png).
5. Learned models in control: the Panda on MuJoCo (independent physics with friction,
   damping and armature the URDF lacks) tracks its reference with PD only, PD + URDF
   feed-forward and PD + the hybrid learned while controlling, +payload part-way
   (`control/arm_demo.run`, offline, deterministic; arm_control.png).

Progress comes from the learner's `status_path` JSON (its diagnostics and the newest stamp
it accepted), the data from its `record_path` .npz, and from arm_sim's log only the stamp
origin and the payload-change line. Nodes are started as
`python -m robot_dynamics_learning.nodes.<name>` (processes.py); this module imports no rclpy.
"""
import argparse
import dataclasses
import json
import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
from robot_dynamics_learning.processes import ros_args, start_node_process, stop_process

ORIGIN = re.compile(r'stamp origin (\d+) ns')
PAYLOAD = re.compile(r'scripted payload change to (\S+) kg at (\S+) s')
SIM_TIME = re.compile(r'published \d+ joint states .*?sim time (\S+) s')

RATES_HZ = (1000.0, 500.0, 400.0, 250.0, 200.0, 100.0, 50.0)   # publish rates to adapt to
# Coarse line-search step sizes of the lap's MPC, car_mpc's default first, each followed by
# car_mpc's refine_candidates finer ones: the shipped controller (`CarMPCConfig`; a test keeps
# these equal to its defaults; not imported here, which would load torch before it is needed).
CANDIDATES = (32, 16, 8)
REFINE = 16
NMSE_TARGET = 0.03          # prequential nMSE the learner should reach
RECOVERY_FACTOR = 1.2       # 'recovered': back within this factor of the level before
RECOVERY_WINDOW_S = 10.0    # ... in the first 10 s after the change (docs/continual.md, hybrid)
SCORED_TARGET = 0.9         # share of the published messages the learner should score
TICK_BUDGET_MS = 50.0       # the car MPC node's budget_s (config/car.yaml)
NMSE_WINDOW_S = 2.0         # robot-time window of the demo's sliding nMSE
TRANSIENT_S = 1.0           # start-up transient: clipped from the error axis, not a target


@dataclasses.dataclass
class Phase:
    """One arm_sim run followed on robot time: stamps from the learner's status file."""

    duration_s: float
    rate_hz: float
    origin_ns: Optional[int] = None
    robot_s: float = 0.0            # newest accepted stamp, seconds after the origin
    first: Optional[Tuple[float, int, float]] = None   # (wall, accepted, robot_s) at start
    last: Optional[Tuple[float, int, float]] = None    # the same, newest
    changes: List[Tuple[float, float]] = dataclasses.field(default_factory=list)  # (kg, s)
    guard_hit: bool = False
    ended: str = ''

    @property
    def complete(self) -> bool:
        """Tell whether the learner has scored (about) the last sample of the phase."""
        return self.robot_s >= self.duration_s - 2.0 / self.rate_hz

    def rates(self) -> Tuple[float, float]:
        """Return (messages scored per wall second, robot seconds per wall second)."""
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return 0.0, 0.0
        wall = self.last[0] - self.first[0]
        return (self.last[1] - self.first[1]) / wall, (self.last[2] - self.first[2]) / wall


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


def read_status(path: Path) -> Optional[dict]:
    """Return the learner's newest status (written atomically), or None before the first."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def follow_phase(phase: Phase, sim: subprocess.Popen, sim_lines: List[str], status: Path,
                 guard_s: float, live: bool) -> Phase:
    """
    Wait until the learner has scored the phase's last robot second; return the phase.

    Ends early (phase.ended says why) when arm_sim exits, when the wall-clock guard is hit,
    or when arm_sim reports it published the whole phase and no new stamp arrives for 5 s
    (the last messages were lost).
    """
    start = time.monotonic()
    printed, moved = start, start
    published_s = 0.0
    while not phase.complete:
        time.sleep(0.25)
        now = time.monotonic()
        for line in sim_lines:
            if phase.origin_ns is None and (match := ORIGIN.search(line)):
                phase.origin_ns = int(match.group(1))
            if (match := SIM_TIME.search(line)):
                published_s = float(match.group(1))
        phase.changes = [(float(m.group(1)), float(m.group(2)))
                         for line in sim_lines if (m := PAYLOAD.search(line))]
        values = read_status(status)
        stamp = None if values is None else values.get('last_stamp_ns')
        if phase.origin_ns is not None and stamp is not None and stamp >= phase.origin_ns:
            robot_s = (stamp - phase.origin_ns) * 1e-9
            if robot_s > phase.robot_s:
                moved = now
            phase.robot_s = robot_s
            phase.last = (now, int(values.get('messages_accepted', 0)), robot_s)
            phase.first = phase.first or phase.last
            if live and now - printed >= 2.0:
                printed = now
                rate = f'{phase.rates()[0]:6.0f} /s' if phase.last != phase.first else '     - /s'
                print(f'    {robot_s:6.1f} s | {now - start:6.1f} s | {rate} | '
                      f"{values.get('samples', 0):>7} | {values.get('train_steps', 0):>6} | "
                      f"{values.get('prequential_nmse', float('nan')):10.4f} | "
                      f"{values.get('latency_p50_ms', float('nan')):.2f}/"
                      f"{values.get('latency_p99_ms', float('nan')):.2f} ms", flush=True)
        if sim.poll() is not None:
            phase.ended = f'arm_sim exited (code {sim.returncode})'
        elif now - start > guard_s:
            phase.guard_hit = True
            phase.ended = f'wall-clock guard ({guard_s:.0f} s) hit'
        elif published_s >= phase.duration_s - 2.0 / phase.rate_hz and now - moved > 5.0:
            phase.ended = 'arm_sim published everything; the last messages were lost'
        if phase.ended:
            break
    return phase


def adapt_rate(scored_per_s: float, requested_hz: float) -> float:
    """
    Return the publish rate the learner can score (Hz).

    The requested one when the warm-up scored 90 % of it, else the largest of RATES_HZ with
    20 % headroom below what was scored (the lowest when nothing was).
    """
    if scored_per_s >= 0.9 * requested_hz:
        return requested_hz
    fitting = [rate for rate in RATES_HZ if rate <= min(0.8 * scored_per_s, requested_hz)]
    return fitting[0] if fitting else RATES_HZ[-1]


def learner_params(model: str, rate_hz: float) -> Dict[str, object]:
    """
    Return the learner's settings counted in samples, scaled from their 1 kHz defaults.

    So they mean the same robot time at a lower publish rate: 50 updates per robot second
    (updates_per_sample 0.05 at 1 kHz), a 1 s warm-up, 20 s of recent samples, a 5 s
    prequential window and, for the hybrid, the payload estimate moving after 10 s.
    """
    scale = rate_hz / 1000.0
    params: Dict[str, object] = {
        'updates_per_sample': min(0.05 / scale, 10.0),
        'warmup_samples': max(int(1000 * scale), 50),
        'recent_capacity': max(int(20000 * scale), 1000),
        'prequential_window': max(int(5000 * scale), 50)}
    if model == 'hybrid':   # one model setting, as a parameter of the model_config mapping
        params['model_config.payload_start_after'] = int(10000 * scale)
    return params


def adapt_candidates() -> Tuple[int, Dict[int, float]]:
    """
    Return the most line-search candidates whose MPC solve fits TICK_BUDGET_MS.

    Also the median solve times (ms) measured on the way; the fewest candidates when none
    fits.
    """
    from robot_dynamics_learning.control import demo_lap
    measured: Dict[int, float] = {}
    for candidates in CANDIDATES:
        measured[candidates] = demo_lap.solve_ms(candidates, refine_candidates=REFINE)
        if measured[candidates] <= TICK_BUDGET_MS:
            break
    return candidates, measured


def sliding_nmse(t: np.ndarray, target: np.ndarray, prediction: np.ndarray,
                 window_s: float = NMSE_WINDOW_S) -> np.ndarray:
    """
    Prequential nMSE of every sample over the preceding `window_s` of robot time.

    t (N,) s; target, prediction (N, d) N m. Per joint, the mean squared error in the window
    over the variance of that joint's torque so far (the learner's definition, but with the
    window in robot time, so it means the same at any publish rate); averaged over joints.
    """
    count = np.arange(1, len(t) + 1)[:, None]
    mean = np.cumsum(target, axis=0) / count
    variance = np.cumsum(target ** 2, axis=0) / count - mean ** 2
    error = np.vstack([np.zeros((1, target.shape[1])),
                       np.cumsum((target - prediction) ** 2, axis=0)])
    begin = np.searchsorted(t, t - window_s, side='left')
    end = np.arange(1, len(t) + 1)
    mse = (error[end] - error[begin]) / (end - begin)[:, None]
    return np.mean(mse / np.maximum(variance, 1e-12), axis=1)


def _plot(t: np.ndarray, target: np.ndarray, prediction: np.ndarray, nmse: np.ndarray,
          names: List[str], change: Optional[float], payload: float, path: Path,
          title: str) -> None:
    """Save torques (two most active joints) and the nMSE over robot time."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    joints = np.argsort(target.std(axis=0))[::-1][:2]
    figure, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for axis, j in zip(axes[:2], joints):
        axis.plot(t, target[:, j], lw=0.6, label='measured')
        axis.plot(t, prediction[:, j], lw=0.6, label='predicted (before training on it)')
        axis.set_ylabel(f'{names[j]} torque [N m]')
        axis.legend(loc='upper right', fontsize=8)
    error_axis = axes[2]
    error_axis.semilogy(t, np.maximum(nmse, 1e-4),
                        label=f'prequential nMSE ({NMSE_WINDOW_S:g} s window)')
    error_axis.axhline(NMSE_TARGET, color='gray', ls=':', label=f'target {NMSE_TARGET:g}')
    settled = nmse[t >= TRANSIENT_S]
    if settled.size:   # the first samples' error would stretch the axis to 1e4
        top = max(float(np.max(settled)), NMSE_TARGET) * 2.0
        error_axis.set_ylim(max(min(float(np.min(settled)), NMSE_TARGET) / 2.0, 1e-4), top)
        error_axis.axvspan(t[0], TRANSIENT_S, color='gray', alpha=0.2,
                           label=f'start-up transient (first {TRANSIENT_S:g} s, clipped)')
    error_axis.set_ylabel('nMSE')
    error_axis.set_xlabel('robot time [s] (joint-state stamps)')
    for axis in axes:
        if change is not None:
            axis.axvline(change, color='red', ls='--', lw=1)
    if change is not None:
        error_axis.text(change, error_axis.get_ylim()[1], f' +{payload:g} kg payload',
                        color='red', va='top')
    error_axis.legend(loc='best', fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _verdict(met: bool) -> str:
    return 'met' if met else 'MISSED'


def interval_nmse(t: np.ndarray, target: np.ndarray, prediction: np.ndarray, begin: float,
                  end: float) -> float:
    """Return the nMSE of the samples with begin <= t < end (variance: all up to `end`)."""
    inside, seen = (t >= begin) & (t < end), t < end
    mse = np.mean((target[inside] - prediction[inside]) ** 2, axis=0)
    return float(np.mean(mse / np.maximum(target[seen].var(axis=0), 1e-12)))


def summary(t: np.ndarray, target: np.ndarray, prediction: np.ndarray, nmse: np.ndarray,
            run: Phase, payload: float) -> List[str]:
    """
    Return one line per target of the run, each met or MISSED with its number.

    t: robot time (s) of every scored sample of the run; target, prediction (N, d) N m;
    nmse their `sliding_nmse`. Recovery compares the nMSE of the RECOVERY_WINDOW_S after the
    payload change with that of as long before it: one number per side, so the trajectory's
    own 2-3x swings of the sliding curve do not decide it.
    """
    due = run.duration_s / 2
    expected = int(round(max(run.duration_s, run.robot_s) * run.rate_hz))   # blocks overshoot
    lines = [f'robot time covered: {run.robot_s:.1f} of {run.duration_s:g} s: '
             f'{_verdict(run.complete)}',
             f'messages scored: {len(t)} of {expected} published ({len(t) / expected:.0%}, '
             f'target {SCORED_TARGET:.0%}): {_verdict(len(t) >= SCORED_TARGET * expected)}']
    reached = np.nonzero((nmse <= NMSE_TARGET) & (t >= TRANSIENT_S))[0]
    settled = nmse[t >= TRANSIENT_S]
    lines.append(f'prequential nMSE <= {NMSE_TARGET:g}: ' + (
        f'first after {reached[0]} samples ({t[reached[0]]:.1f} s): met' if reached.size
        else 'MISSED (lowest ' + (f'{np.min(settled):.4f})' if settled.size else 'none)')))
    change = run.changes[0][1] if run.changes else None
    if change is None or not np.any(t >= change) or not np.any(t < change):
        lines.append(f'payload change +{payload:g} kg at {due:g} s: MISSED, not shown (robot '
                     f'time reached {run.robot_s:.1f} s)')
        lines.append('recovery: MISSED, not shown (no payload change in the run)')
    else:
        lines.append(f'payload change +{run.changes[0][0]:g} kg at {change:.2f} s: shown, '
                     f'{int(np.sum(t >= change))} samples scored after it: met')
        span = min(RECOVERY_WINDOW_S, change - t[0], t[-1] - change)
        before = interval_nmse(t, target, prediction, change - span, change)
        after = interval_nmse(t, target, prediction, change, change + span + 1e-9)
        peak = np.max(nmse[(t >= change) & (t <= change + span)])
        lines.append(f'recovery: nMSE {after:.4f} in the {span:.1f} s after the change vs '
                     f'{before:.4f} before ({after / before:.2f}x, target <= '
                     f'{RECOVERY_FACTOR:g}x; sliding peak {peak:.4f}): '
                     f'{_verdict(after <= RECOVERY_FACTOR * before)}')
    lines.append(f'final nMSE: {nmse[-1]:.4f}' if len(nmse) else 'final nMSE: none')
    return lines


def lap_summary(lap: dict) -> List[str]:
    """Return the lap's targets, met or MISSED with their numbers (`demo_lap.run` metrics)."""
    return [f"lap completed: {lap['laps']:.2f} laps, {lap['lap_time_s']:.2f} s per lap, mean "
            f"speed {lap['mean_speed_mps']:.2f} m/s: {_verdict(lap['completed'])}",
            f"on the track: max |lateral| {lap['max_lateral_m']:.2f} m of "
            f"{lap['half_width_m']:.2f} m: {_verdict(not lap['left_track'])}",
            f"MPC solve p50 / p99 {lap['solve_ms_p50']:.0f} / {lap['solve_ms_p99']:.0f} ms with "
            f"{lap['candidates']} + {lap['refine_candidates']} step sizes (the car node's budget "
            f'{TICK_BUDGET_MS:g} ms): '
            f"{_verdict(lap['solve_ms_p99'] <= TICK_BUDGET_MS)}", f"figure: {lap['plot']}"]


def shown_and_not(run: Phase, payload: float) -> List[str]:
    """Say, after an early end (guard), what the run showed and what it did not."""
    due = run.duration_s / 2
    shown = [f'learning over {run.robot_s:.1f} s of robot time']
    missing = []
    if run.changes and run.robot_s >= run.changes[0][1]:
        shown.append(f'the +{payload:g} kg payload change and {run.robot_s - due:.1f} s after '
                     'it')
    else:
        missing.append(f'the +{payload:g} kg payload change (due at {due:g} s) and the '
                       'recovery')
    missing.append(f'the last {run.duration_s - run.robot_s:.1f} s of robot time')
    return [f'{run.ended} at robot time {run.robot_s:.1f} of {run.duration_s:g} s',
            'shown: ' + '; '.join(shown), 'not shown: ' + '; '.join(missing)]


def arm_control_summary(result: dict, png: Path) -> List[str]:
    """Return the arm-control lines: RMSE per controller, the learned model's worth, met or not."""
    rmse = {mode: run['rmse_before_change_rad'] * 1e3
            for mode, run in result['controllers'].items()}
    after = {mode: run['rmse_after_change_rad'] * 1e3
             for mode, run in result['controllers'].items()}
    return [f"tracking RMSE before the payload: PD {rmse['none']:.2f}, URDF feed-forward "
            f"{rmse['urdf']:.2f}, learned feed-forward {rmse['learned']:.2f} mrad",
            f"learned beats PD only: {rmse['none'] / rmse['learned']:.1f}x: "
            f"{_verdict(rmse['learned'] < rmse['none'])}",
            f"learned beats URDF feed-forward: {rmse['urdf'] / rmse['learned']:.2f}x: "
            f"{_verdict(rmse['learned'] < rmse['urdf'])}",
            f"after +{result['payload_kg']:g} kg: PD {after['none']:.2f}, URDF "
            f"{after['urdf']:.2f}, learned {after['learned']:.2f} mrad", f'figure: {png}']


def main(argv: Optional[List[str]] = None) -> int:
    """Run learner and simulator over DDS on robot time; measure, adapt, summarise, plot."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--out', type=Path, default=Path('out/demo'), help='output folder')
    parser.add_argument('--duration', type=float, default=60.0,
                        help='robot seconds of the run (the payload changes halfway)')
    parser.add_argument('--payload', type=float, default=2.0, help='payload added halfway (kg)')
    parser.add_argument('--model', default='hybrid',
                        help='learner model type (hybrid: URDF + online payload + LSTM)')
    parser.add_argument('--urdf', default='', help="arm URDF ('' = urdf/panda.urdf)")
    parser.add_argument('--warmup', type=float, default=3.0,
                        help='robot seconds of warm-up at 1 kHz that measure the computer '
                        '(0: none, publish at --rate-hz)')
    parser.add_argument('--rate-hz', type=float, default=0.0,
                        help='publish rate of the run (0: 1 kHz, lower if the warm-up says so)')
    parser.add_argument('--guard-s', type=float, default=0.0,
                        help='wall-clock guard of the run, start-up excluded '
                        '(0: 5 x duration + 60 s)')
    parser.add_argument('--startup-guard-s', type=float, default=300.0,
                        help='wall seconds the learner may take to start')
    parser.add_argument('--no-lap', action='store_true', help='skip the RC-car lap')
    parser.add_argument('--arm-control-s', type=float, default=60.0,
                        help='simulated seconds of the MuJoCo arm-control comparison '
                        '(payload at 2/3 of it; 0: skip)')
    args = parser.parse_args(argv)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    args.out.mkdir(parents=True, exist_ok=True)
    record_path, status_path = args.out / 'continual_record.npz', args.out / 'learner_status.json'
    record_path.unlink(missing_ok=True)
    status_path.unlink(missing_ok=True)
    shutil.rmtree(args.out / 'checkpoints', ignore_errors=True)
    guard_s = args.guard_s or 5.0 * args.duration + 60.0
    started = time.monotonic()
    processes: List[subprocess.Popen] = []
    followers: List[threading.Thread] = []

    def start(executable: str, log: str, params: Dict[str, object]
              ) -> Tuple[subprocess.Popen, List[str]]:
        lines: List[str] = []
        process = start_node_process(executable, ros_args(params), stdout=subprocess.PIPE)
        processes.append(process)
        followers.append(_follow(process, args.out / log, lines))
        return process, lines

    def start_learner(log: str, status: Path, rate: float, record: bool) -> bool:
        """Start a learner for `rate` and wait until it spins; False if it did not start."""
        status.unlink(missing_ok=True)
        begin = time.monotonic()
        learner, _ = start('dynamics_learner', log, {
            'model': args.model, 'urdf': args.urdf, 'status_path': str(status),
            'record_path': str(record_path) if record else '', 'diagnostics_period_s': 0.5,
            'checkpoint_dir': str(args.out / 'checkpoints'), 'resume': False,
            **learner_params(args.model, rate)})
        while read_status(status) is None:   # written once it spins, subscribed
            if learner.poll() is not None or time.monotonic() - begin > args.startup_guard_s:
                print(f'    the learner did not start within {args.startup_guard_s:.0f} s: '
                      f'nothing shown; see {args.out / log}')
                return False
            time.sleep(0.25)
        print(f'    learner ready after {time.monotonic() - begin:.0f} s (not part of the run)',
              flush=True)
        return True

    def start_sim(log: str, duration: float, rate: float,
                  schedule: List[float]) -> Tuple[subprocess.Popen, List[str]]:
        params = {'duration_s': duration, 'urdf': args.urdf, 'rate_hz': rate}
        if schedule:   # an empty list has no type: the parameter stays unset
            params['payload_schedule'] = schedule
        return start('arm_sim', log, params)

    try:
        rate = args.rate_hz or 1000.0
        candidates = CANDIDATES[0]
        report: Dict[str, object] = {}
        if args.warmup > 0:
            print(f'[1] warm-up: dynamics_learner ({args.model}) and arm_sim, {args.warmup:g} s '
                  f'of robot time at {rate:g} Hz', flush=True)
            warm_status = args.out / 'learner_warmup_status.json'
            if not start_learner('learner_warmup.log', warm_status, rate, record=False):
                return 1
            sim, lines = start_sim('arm_sim_warmup.log', args.warmup, rate, [])
            warmup = follow_phase(Phase(args.warmup, rate), sim, lines, warm_status, guard_s,
                                  live=False)
            for process in processes:   # the run starts afresh, set for its own rate
                stop_process(process)
            scored, factor = warmup.rates()
            measured = (f'{scored:.0f} messages/s scored of {rate:g} (robot time at '
                        f'{factor:.2f}x wall time)' if warmup.last else
                        f'no message scored ({warmup.ended})')
            if not args.rate_hz:
                rate = adapt_rate(scored, rate)
            adapted = ([f"arm_sim at {rate:g} Hz, the learner's sample counts scaled to it"]
                       if rate != (args.rate_hz or 1000.0) else [])
            if not args.no_lap:
                candidates, solves = adapt_candidates()
                measured += ', MPC solve ' + ', '.join(f'{ms:.0f} ms ({c} candidates)'
                                                       for c, ms in solves.items())
                if candidates != CANDIDATES[0]:
                    adapted.append(f'lap line search with {candidates} candidates instead of '
                                   f'{CANDIDATES[0]}')
            report['warmup'] = f'measured: {measured} -> ' + (
                'adapting: ' + ', '.join(adapted) if adapted else 'nothing to adapt')
            print(f"    {report['warmup']}", flush=True)
        due = args.duration / 2
        print(f'[2] run: {args.duration:g} s of robot time at {rate:g} Hz, +{args.payload:g} kg '
              f'payload at {due:g} s (wall-clock guard {guard_s:.0f} s)', flush=True)
        if not start_learner('learner.log', status_path, rate, record=True):
            return 1
        print('    robot time | wall time | messages/s | samples | updates | prequential nMSE '
              '| callback latency p50/p99', flush=True)
        run_started = time.monotonic()
        sim, lines = start_sim('arm_sim.log', args.duration, rate, [due, args.payload])
        run = follow_phase(Phase(args.duration, rate), sim, lines, status_path, guard_s,
                           live=True)
        run_wall = time.monotonic() - run_started
    finally:
        for process in processes:
            stop_process(process)
        for follower in followers:
            follower.join(timeout=5)
    if run.ended:
        for line in shown_and_not(run, args.payload):
            print(f'    {line}')
    if not record_path.exists() or run.origin_ns is None:
        print(f'no record of the run; see {args.out}/learner.log, arm_sim.log')
        return 1
    record = dict(np.load(record_path))
    keep = record['time'] >= run.origin_ns * 1e-9
    t = record['time'][keep] - run.origin_ns * 1e-9
    target, prediction = record['target'][keep], record['prediction'][keep]
    nmse = sliding_nmse(t, target, prediction)
    png = args.out / 'continual_demo.png'
    change = run.changes[0][1] if run.changes else None
    _plot(t, target, prediction, nmse, [str(n) for n in record['names']], change,
          args.payload, png, f'dynamics_learner on arm_sim over ROS 2 at {rate:g} Hz: online '
          f'{args.model} inverse dynamics')
    scored, factor = run.rates()
    print(f'[3] summary (robot time; the run took {run_wall:.0f} s of wall time with start-up, '
          f'robot time went at {factor:.2f}x wall time once published, {scored:.0f} messages/s '
          'scored)')
    report.update(rate_hz=rate, candidates=candidates, robot_s=run.robot_s,
                  run_wall_s=run_wall, robot_per_wall_s=factor, scored_per_s=scored,
                  ended=run.ended or 'complete',
                  targets=summary(t, target, prediction, nmse, run, args.payload))
    for line in report['targets']:
        print(f'    {line}')
    print(f'    figure: {png}; logs: {args.out}/learner.log, arm_sim.log '
          f'({time.monotonic() - started:.0f} s in all)', flush=True)
    if not args.no_lap:
        from robot_dynamics_learning.control import demo_lap
        print(f'[4] RC car: one MPC lap ({candidates} + {REFINE} line-search step sizes, as '
              'car_mpc)', flush=True)
        report['lap'] = lap_summary(demo_lap.run(args.out, candidates, REFINE))
        for line in report['lap']:
            print(f'    {line}')
    if args.arm_control_s > 0:
        from robot_dynamics_learning.control import arm_demo
        print(f'[5] Panda on MuJoCo: {args.arm_control_s:.0f} s of tracking with PD only, URDF '
              'and learned feed-forward (offline, about 2x slower than real time)', flush=True)
        report['arm_control'] = arm_control_summary(arm_demo.run(
            args.out, args.arm_control_s, round(args.arm_control_s * 2 / 3), args.payload),
            args.out / 'arm_control.png')
        for line in report['arm_control']:
            print(f'    {line}')
    (args.out / 'demo_summary.json').write_text(json.dumps(report, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
