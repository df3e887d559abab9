"""`make demo` on robot time: a slow publisher still shows the payload change and the summary."""
import json
import os
from pathlib import Path
import re
import signal
import subprocess
import threading
from typing import List

import numpy as np
import pytest
from robot_dynamics_learning import demo

TARGET_LINES = ('robot time covered:', 'messages scored:', 'prequential nMSE <= 0.03:',
                'payload change +2 kg at', 'recovery')


def test_sliding_nmse_is_the_windowed_error_over_the_variance_so_far():
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.5e-3, 3e-3, 400))   # uneven steps: the window is in seconds
    target = rng.normal(size=(400, 2)) * [1.0, 5.0]
    prediction = target + rng.normal(size=(400, 2)) * 0.3
    nmse = demo.sliding_nmse(t, target, prediction, window_s=0.1)
    for i in (1, 57, 399):
        inside = (t > t[i] - 0.1 - 1e-12) & (np.arange(400) <= i)
        mse = np.mean((target[inside] - prediction[inside]) ** 2, axis=0)
        assert nmse[i] == pytest.approx(np.mean(mse / target[:i + 1].var(axis=0)), rel=1e-9)


def test_rate_adapts_with_headroom_to_what_the_warmup_scored():
    assert demo.adapt_rate(950.0, 1000.0) == 1000.0
    assert demo.adapt_rate(400.0, 1000.0) == 250.0     # the busy machine
    assert demo.adapt_rate(640.0, 1000.0) == 500.0
    assert demo.adapt_rate(0.0, 1000.0) == demo.RATES_HZ[-1]


def test_learner_settings_keep_their_robot_time_at_a_lower_rate():
    at_1khz = demo.learner_params('hybrid', 1000.0)   # the node's and config's defaults
    assert at_1khz == {'updates_per_sample': 0.05, 'warmup_samples': 1000,
                       'recent_capacity': 20000, 'prequential_window': 5000,
                       'model_config.payload_start_after': 10000}
    at_100hz = demo.learner_params('hybrid', 100.0)
    assert at_100hz['updates_per_sample'] == pytest.approx(0.5)   # 50 updates per second
    assert at_100hz['model_config.payload_start_after'] == 1000
    assert not any(k.startswith('model_config') for k in demo.learner_params('lstm', 100.0))


def test_summary_and_guard_say_what_was_not_shown():
    run = demo.Phase(60.0, 1000.0, robot_s=11.0, ended='wall-clock guard (360 s) hit')
    t = np.arange(1, 11001) * 1e-3
    lines = demo.summary(t, np.ones((t.size, 1)), np.zeros((t.size, 1)), np.full(t.size, 0.5),
                         run, 2.0)
    assert 'robot time covered: 11.0 of 60 s: MISSED' in lines
    assert ('payload change +2 kg at 30 s: MISSED, not shown (robot time reached 11.0 s)'
            in lines)
    assert 'prequential nMSE <= 0.03: MISSED (lowest 0.5000)' in lines
    ended, shown, missing = demo.shown_and_not(run, 2.0)
    assert ended.startswith('wall-clock guard (360 s) hit at robot time 11.0 of 60 s')
    assert 'payload change' not in shown
    assert 'the +2 kg payload change (due at 30 s)' in missing
    assert 'the last 49.0 s of robot time' in missing


def feed(status: Path, origin_ns: int, robot_s: List[float], period_s: float) -> None:
    """Write a learner status file whose newest stamp walks through robot_s (a slow stream)."""
    for k, t in enumerate(robot_s):
        status.write_text(json.dumps({'messages_accepted': 100 * k,
                                      'last_stamp_ns': origin_ns + int(t * 1e9)}))
        threading.Event().wait(period_s)


@pytest.mark.parametrize('guard_s, complete', [(30.0, True), (0.6, False)])
def test_phase_follows_stamps_not_the_wall_clock(tmp_path, guard_s, complete):
    # Robot time at half the wall clock's pace at first, then faster: the phase ends on robot time
    # (3 s) however long that takes, or at the guard, which says how far it got.
    origin = 1_700_000_000_000_000_000
    status = tmp_path / 'status.json'
    sim = subprocess.Popen(['sleep', '60'])   # a simulator that stays up, as arm_sim does
    writer = threading.Thread(target=feed, args=(status, origin, [
        0.05 * k for k in range(20)] + [1.0 + 0.5 * k for k in range(5)], 0.1), daemon=True)
    writer.start()
    try:
        phase = demo.follow_phase(demo.Phase(3.0, 1000.0), sim, [
            f'[arm_sim]: stamp origin {origin} ns (stamp = origin + simulated time)',
            '[arm_sim]: scripted payload change to 2.0 kg at 1.50 s'], status, guard_s,
            live=False)
    finally:
        sim.kill()
        sim.wait()
        writer.join()
    assert phase.complete is complete and phase.guard_hit is not complete
    assert phase.changes == [(2.0, 1.5)]
    if complete:
        assert phase.robot_s == pytest.approx(3.0) and phase.ended == ''
    else:
        assert 0.0 < phase.robot_s < 3.0
        assert phase.ended == 'wall-clock guard (1 s) hit'


def family(pid: int) -> List[int]:
    """Return pid and its descendants (the node and its physics process), from /proc."""
    parents = {}
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(')', 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass   # a process that ended meanwhile
    found = [pid]
    for member in found:
        found += [child for child, parent in parents.items() if parent == member]
    return found


def test_recovery_compares_the_windows_after_and_before_the_change():
    rng = np.random.default_rng(1)
    t = np.arange(1, 2001) * 0.01   # 20 s at 100 Hz, payload change at 10 s
    target = rng.normal(size=(2000, 3))
    run = demo.Phase(20.0, 100.0, robot_s=20.0, changes=[(2.0, 10.0)])
    for after_std, expected in ((0.1, 'met'), (0.2, 'MISSED')):
        prediction = target + rng.normal(size=target.shape) * np.where(t[:, None] < 10.0, 0.1,
                                                                       after_std)
        lines = demo.summary(t, target, prediction, demo.sliding_nmse(t, target, prediction),
                             run, 2.0)
        line = next(s for s in lines if s.startswith('recovery:'))
        ratio = float(re.search(r'\((\S+)x, target', line).group(1))
        assert ratio == pytest.approx((after_std / 0.1) ** 2, rel=0.15), line
        assert line.endswith(f': {expected}'), line
        assert 'payload change +2 kg at 10.00 s: shown, 1001 samples scored after it: met' in lines


def throttle(processes: List[subprocess.Popen], logs: List[Path], stop: threading.Event,
             run_s: float = 0.02, pause_s: float = 0.2) -> None:
    """
    Let each arm_sim (node and physics) run only run_s of every run_s + pause_s.

    SIGSTOP/SIGCONT, as a CPU busy with other work would: the publisher falls behind the
    1 kHz it is asked for. Start-up is left alone (the log shows the stamp origin once it
    publishes) to keep the test short.
    """
    def publishing() -> List[int]:
        return [pid for p, log in zip(processes, logs) if p.poll() is None and log.exists()
                and 'stamp origin' in log.read_text() for pid in family(p.pid)]

    def signal_all(pids: List[int], number: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass

    while not stop.is_set():
        paused = publishing()
        signal_all(paused, signal.SIGSTOP)
        stop.wait(pause_s)
        signal_all(paused, signal.SIGCONT)
        stop.wait(run_s)


@pytest.mark.ros
def test_slow_publisher_still_shows_the_payload_change_and_every_target(tmp_path, capsys,
                                                                        monkeypatch):
    sims: List[subprocess.Popen] = []
    start = demo.start_node_process

    def start_and_remember(executable, args, **kwargs):
        process = start(executable, args, **kwargs)
        if executable == 'arm_sim':
            sims.append(process)
        return process

    monkeypatch.setattr(demo, 'start_node_process', start_and_remember)
    stop = threading.Event()
    logs = [tmp_path / 'arm_sim.log']
    thread = threading.Thread(target=throttle, args=(sims, logs, stop), daemon=True)
    thread.start()
    try:
        # No warm-up, so no adaptation: the publisher stays too slow for its 1 kHz. The arm
        # control part is test_arm_demo's (60 s of it here took 19 min on a loaded machine).
        code = demo.main(['--out', str(tmp_path), '--duration', '3', '--warmup', '0',
                          '--no-lap', '--arm-control-s', '0'])
    finally:
        stop.set()
        thread.join()
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((tmp_path / 'demo_summary.json').read_text())
    assert report['robot_per_wall_s'] < 0.7, out   # the publisher really was slow
    summary = out[out.index('[3] summary'):].splitlines()
    for start_of_line in TARGET_LINES:
        line = next((s for s in summary if start_of_line in s), None)
        assert line is not None and re.search(r': (met|MISSED)\b', line), (start_of_line, out)
    assert 'robot time covered: 3.' in out and 'of 3 s: met' in out, out
    assert re.search(r'payload change \+2 kg at 1\.50 s: shown, \d+ samples scored after it: '
                     r'met', out), out
    assert (tmp_path / 'continual_demo.png').stat().st_size > 0
    assert report['rate_hz'] == 1000.0 and report['ended'] == 'complete'


def test_the_demo_lap_drives_car_mpcs_default_line_search():
    from robot_dynamics_learning.control.car_mpc_params import CarMPCConfig
    assert demo.CANDIDATES[0] == CarMPCConfig.candidates
    assert demo.REFINE == CarMPCConfig.refine_candidates
