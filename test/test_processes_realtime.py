"""Opt-in real-time scheduling of a node's threads (processes.set_realtime_priority)."""
import os
import subprocess
import sys
import textwrap

import pytest
from robot_dynamics_learning.processes import set_realtime_priority

# Run in a child interpreter: the test process itself must not become a real-time one.
CHILD = textwrap.dedent("""
    import os, threading, time
    from robot_dynamics_learning.processes import set_normal_scheduling, set_realtime_priority
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        count = set_realtime_priority(7)
    except PermissionError:
        print('not permitted')
        raise SystemExit(0)
    policies = {os.sched_getscheduler(int(t)) & ~os.SCHED_RESET_ON_FORK
                for t in os.listdir('/proc/self/task')}
    priorities = {os.sched_getparam(int(t)).sched_priority for t in os.listdir('/proc/self/task')}
    pid = os.fork()
    if pid == 0:
        os._exit(10 + os.sched_getscheduler(0))
    child = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) - 10
    set_normal_scheduling()
    restored = {os.sched_getscheduler(int(t)) for t in os.listdir('/proc/self/task')}
    stop.set()
    worker.join()
    print(count, policies == {os.SCHED_FIFO}, priorities, child == os.SCHED_OTHER,
          restored == {os.SCHED_OTHER})
""")


@pytest.mark.parametrize('priority', [0, 100, -1])
def test_priority_outside_1_to_99_is_refused(priority):
    with pytest.raises(ValueError, match='1, 99'):
        set_realtime_priority(priority)


@pytest.mark.skipif(not hasattr(os, 'SCHED_FIFO'), reason='Linux scheduling only')
def test_every_thread_runs_fifo_forked_children_do_not_and_it_can_be_undone():
    out = subprocess.run([sys.executable, '-c', CHILD], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    if out == ['not', 'permitted']:
        pytest.skip('SCHED_FIFO is not permitted here (no CAP_SYS_NICE, RLIMIT_RTPRIO 0)')
    count, all_fifo, priority, child_ordinary, restored = out
    assert int(count) >= 2          # the main thread and the worker at least
    assert all_fifo == 'True'
    assert priority == '{7}'
    assert child_ordinary == 'True'
    assert restored == 'True'           # set_normal_scheduling undoes it
