"""
Start and stop node processes without `ros2 run` (the PyPI wheels have no ros2cli).

Used by the demo and the node tests; imports no rclpy, so the demo stays ROS-free. Also the
one rule of the helper processes nodes spawn (trainer, arm physics): `die_with_parent`, and
the opt-in real-time scheduling of a node's own threads: `set_realtime_priority`.
"""
import ctypes
import multiprocessing.process
import os
from pathlib import Path
import signal
import subprocess
import sys
from typing import Dict, List, Optional

PR_SET_PDEATHSIG = 1   # linux/prctl.h


def ros_args(params: Optional[Dict[str, object]] = None,
             remaps: Optional[Dict[str, str]] = None,
             params_file: Optional[Path] = None) -> List[str]:
    """
    Return `--ros-args` for parameters (`-p name:=value`), remaps and a params file.

    Booleans become `true`/`false`, sequences YAML flow lists; an empty string is skipped
    (it is not a valid `-p` override, so the node keeps its default).
    """
    args = ['--ros-args']
    if params_file is not None:
        args += ['--params-file', str(params_file)]
    for name, value in (params or {}).items():
        if value == '':
            continue
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, (list, tuple)):
            value = '[' + ','.join(repr(v) if isinstance(v, str) else str(v)
                                   for v in value) + ']'
        args += ['-p', f'{name}:={value}']
    for source, target in (remaps or {}).items():
        args += ['-r', f'{source}:={target}']
    return args


def start_node_process(executable: str, args: List[str], stdout=subprocess.DEVNULL,
                       cwd: Optional[Path] = None) -> subprocess.Popen:
    """Run `robot_dynamics_learning.nodes.<executable>` unbuffered in its own process."""
    command = [sys.executable, '-u', '-m', f'robot_dynamics_learning.nodes.{executable}']
    text = stdout is subprocess.PIPE
    return subprocess.Popen(command + args, cwd=cwd, env=dict(os.environ), stdout=stdout,
                            stderr=subprocess.STDOUT, text=text)


def stop_process(process: subprocess.Popen, timeout: float = 20.0) -> int:
    """Send SIGINT (as Ctrl-C would) and wait; kill if it does not exit in time."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def start_child(process: multiprocessing.process.BaseProcess) -> None:
    """
    Start a helper process (trainer, arm physics) with SIGINT blocked from its first moment.

    Ctrl-C in a terminal reaches the whole process group: a child that took it printed a
    KeyboardInterrupt traceback, though its parent stops it anyway. Blocking SIGINT in this
    thread while the child is created makes the child inherit the blocked mask through exec;
    `die_with_parent`, its first call, then ignores SIGINT for good. The parent's own SIGINT
    handling (rclpy's) is untouched: only this thread's mask changes, for the moment of start.
    """
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def die_with_parent(parent_pid: int) -> None:
    """
    Have Linux kill this (child) process when its parent dies (prctl PR_SET_PDEATHSIG).

    So a node killed with `kill -9` leaves no orphan behind (one writing checkpoints, or
    simulating for nobody). Elsewhere, or if prctl fails, callers also poll
    `os.getppid() != parent_pid`. Exits at once if the parent is already gone. Also makes the
    child ignore SIGINT (see `start_child`): its parent ends it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if sys.platform.startswith('linux'):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(0)


def set_realtime_priority(priority: int) -> int:
    """
    Put every thread of this process under SCHED_FIFO at `priority` (1-99); return the count.

    Called once the node exists, so the middleware's receive threads are included: at 1 kHz
    on a loaded machine the tail latency is time spent runnable behind other processes, and
    a real-time thread preempts them at once (ros2_control runs its loop this way). Child
    processes stay ordinary SCHED_OTHER ones: those started before (trainer, arm physics) are
    not touched, later ones are reset at fork (SCHED_RESET_ON_FORK). Needs CAP_SYS_NICE or
    an RLIMIT_RTPRIO of at least `priority`; raises PermissionError otherwise, ValueError
    outside 1-99, OSError off Linux.
    """
    if not 1 <= priority <= 99:
        raise ValueError(f'real-time priority must be in [1, 99], got {priority}')
    if not hasattr(os, 'SCHED_FIFO'):
        raise OSError('real-time scheduling needs Linux (os.SCHED_FIFO)')
    return _schedule_all_threads(os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, priority)


def set_normal_scheduling() -> int:
    """Undo `set_realtime_priority`: every thread back to SCHED_OTHER; return the count."""
    return _schedule_all_threads(os.SCHED_OTHER, 0)


def _schedule_all_threads(policy: int, priority: int) -> int:
    """Apply `policy` at `priority` to every thread of this process; return the count."""
    threads = [int(tid) for tid in os.listdir('/proc/self/task')]
    for tid in threads:
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(priority))
        except ProcessLookupError:   # a thread that ended meanwhile
            pass
    return len(threads)
