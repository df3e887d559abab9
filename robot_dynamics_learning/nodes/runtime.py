"""
The Jazzy/Humble `main()` idiom shared by every node.

`rclpy.init()` is not a context manager before Kilted, so init, spin and shutdown are spelled
out once here: Ctrl-C and external shutdown end the node quietly, and the node is always
destroyed.
"""
import faulthandler
import gc
import os
from pathlib import Path
import signal
import sys
import time
from typing import Any, Callable, List, Optional, Tuple

import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import InvalidHandle, ParameterException
from rclpy.executors import (ExternalShutdownException, MultiThreadedExecutor,
                             SingleThreadedExecutor)
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from rclpy.subscription import Subscription
from robot_dynamics_learning.memory import retain_freed_memory
from robot_dynamics_learning.nodes.parameters import declare
from robot_dynamics_learning.processes import set_realtime_priority

# Python's default 5 ms GIL switch interval lets one thread (a trainer, a solver, the
# executor's own wait loop) hold the GIL for 5 ms while a callback thread waits: at
# 100 Hz-1 kHz that drops most messages. 0.2 ms keeps hand-offs short.
GIL_SWITCH_INTERVAL_S = 0.0002
# How long the executor's running callbacks may take to finish after SIGINT (of the 2 s a
# node has to end: launch escalates to SIGTERM after 5 s).
SHUTDOWN_WAIT_S = 1.0
# By then (from SIGINT, or from the end of the spin) a node has ended, or it prints every
# thread's stack and exits with code 1 (launch sends SIGTERM after 5 s, SIGKILL 10 s later).
SHUTDOWN_DEADLINE_S = 4.0
# Period of the timer that wakes the spin loop (`DeferrableInterrupt.defer`): how late a
# node may notice Ctrl-C when nothing else wakes it.
SIGNAL_POLL_S = 0.1
STARTUP_REFUSED = 2   # exit code of a node that refused its parameters or files at start
# What building a node raises for bad input: our checks, a missing or unreadable file (a
# symlink loop, no permission), rclpy's range checks.
STARTUP_REFUSALS = (ValueError, OSError, ParameterException)


def spin_node(make_node: Callable[[], Node], args: Optional[List[str]] = None,
              threads: int = 1) -> None:
    """
    Create the node after `rclpy.init` and spin it until Ctrl-C or an external shutdown.

    A ValueError, OSError or rclpy ParameterException while the node is built (a parameter
    out of its range, a refused config, URDF or checkpoint, a file that is missing or cannot
    be read) ends the process with one logged line and exit code 2.

    Once spinning, Ctrl-C or SIGTERM ends the spin between two callbacks, never inside one or
    inside the executor (`DeferrableInterrupt`). A node that has not ended
    SHUTDOWN_DEADLINE_S after it prints every thread's stack and exits with code 1 instead of
    hanging.

    threads == 1 (default) spins a single-threaded executor: in the Jazzy wheels the
    multi-threaded executor's per-message hand-off dropped most of a 240 Hz best-effort
    stream on an idle 2-core machine. Only nodes whose callback groups must run concurrently
    (the MPC's watchdog beside its solver) ask for threads > 1. rclpy's EventsExecutor hung
    beside a second Python thread in these wheels, so it is not used.
    """
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    sys.unraisablehook = _quiet_half_built_futures
    # A crash in native code (DDS, a torch kernel) then prints every thread's Python stack:
    # a node that ended with no word (a CI run's estimator, 29 Nov) says where.
    faulthandler.enable(all_threads=True)
    retain_freed_memory()
    # Ctrl-C and launch's SIGTERM are handled here alone, in the main thread. rclpy's own
    # handlers trigger every executor's guard condition from a native thread, which raced
    # with the executor destroying its guard condition at shutdown: nodes segfaulted in a
    # thread without Python (CI, 29 Nov: car_mpc, dynamics_learner, exit -11).
    interrupt = DeferrableInterrupt()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupt)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    executor = None
    exit_code = 0
    try:
        node = make_node()
        # Objects alive now (torch, rclpy, the model) never change: a full collection
        # traversing them took 120-180 ms in the learner, a stall of 120+ messages at 1 kHz.
        gc.freeze()
        _apply_realtime_priority(node)
        executor = (SingleThreadedExecutor() if threads == 1
                    else DrainingExecutor(num_threads=threads))
        executor.add_node(node)
        interrupt.defer(node)
        while executor.context.ok() and not interrupt.requested:
            executor.spin_once()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except STARTUP_REFUSALS as error:
        if node is not None or not rclpy.ok():
            raise
        # A refused parameter, config or file at start: one line naming it, no traceback.
        rclpy.logging.get_logger('robot_dynamics_learning').error(f'not started: {error}')
        exit_code = STARTUP_REFUSED
    except Exception:
        # An external shutdown (the node's own `context.try_shutdown()`, as replay_evaluator
        # does) makes a callback still running fail in its rclpy call. Anything else is an
        # error.
        if rclpy.ok():
            raise
    finally:
        # Destroying the node and the interpreter's exit wait for every thread (a callback
        # stuck in a pool thread once kept car_mpc alive past SIGTERM in CI): past the
        # deadline the stacks say where, and the process ends instead of hanging.
        faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE_S, exit=True)
        if executor is not None:
            # Callbacks still running in the executor's threads finish before the node and
            # its entities are destroyed (else: 'cannot use Destroyable' in their futures).
            executor.shutdown(timeout_sec=SHUTDOWN_WAIT_S)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    if exit_code:
        sys.exit(exit_code)


class DeferrableInterrupt:
    """
    SIGINT/SIGTERM handler: KeyboardInterrupt while a node is built, a request once it spins.

    Python raises KeyboardInterrupt in the main thread at whatever bytecode runs next: inside
    the executor's own machinery it leaked what it held. Raised in `Condition.__enter__`
    (`ThreadPoolExecutor.submit`) after the lock was taken and before the `with` owned it,
    it left the pool's lock held, every worker blocked on it and the interpreter, which joins
    them at exit, hung (car_mpc in CI). Raised in `ExitStack.enter_context` while the
    executor builds its wait set, it left an entity's handle in use, which `destroy_node`
    waits for (car_state_estimator and dynamics_learner outlived SIGTERM in launch tests).
    Deferred, the handler only records the request and arms the shutdown deadline (a callback
    that never returns); the spin loop then ends between two `spin_once` calls, where nothing
    is held, and no callback is cut off half-way. The handler runs in the main thread once
    the executor's wait has returned, so the loop's next check sees the request: nothing
    needs waking.
    """

    def __init__(self) -> None:
        self.requested = False
        self._deferred = False

    def defer(self, node: Node) -> None:
        """
        From now on, record the signal instead of raising; a timer on `node` bounds the wait.

        A Python handler runs only once the executor's wait returns, and no rclpy handler
        wakes it: a timer every SIGNAL_POLL_S does (a node without timers would never end).
        A timer made once, not a timeout per wait: `spin_once(timeout_sec)` builds an rcl
        timer every wait, and the demo's learner then scored 84 % of a 1 kHz stream.
        """
        self._deferred = True
        # On the steady clock: a ROS-time timer (use_sim_time) stops with /clock.
        node.create_timer(SIGNAL_POLL_S, lambda: None,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))

    def __call__(self, signum: int, frame: Any) -> None:
        """Raise KeyboardInterrupt, or once deferred record the request."""
        if not self._deferred:
            raise KeyboardInterrupt
        if not self.requested:
            self.requested = True
            faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE_S, exit=True)


def _quiet_half_built_futures(unraisable: Any) -> None:
    """
    Drop rclpy's `Future.__del__` AttributeError; report every other unraisable error.

    Ctrl-C can land inside an rclpy `Task.__init__` (a lifecycle or parameter service call
    being set up): the half-built task lacks `_exception`, and its `__del__` then printed
    'Exception ignored ... Traceback' at every such shutdown, although nothing was lost.
    """
    if (isinstance(unraisable.exc_value, AttributeError)
            and getattr(unraisable.object, '__qualname__', '') == 'Future.__del__'):
        return
    sys.__unraisablehook__(unraisable)


class DrainingExecutor(MultiThreadedExecutor):
    """
    rclpy's multi-threaded executor whose `shutdown` waits for the callbacks still running.

    Jazzy's `Executor.shutdown` neither waits for the thread pool nor collects the callbacks'
    outcome, so a callback still running when the node was destroyed failed ('cannot use
    Destroyable because destruction was requested') and its task printed 'The following
    exception was never retrieved' at exit. Here callbacks queued but not started are
    cancelled, every pool thread ends first (bounded by the timeout), and what the last
    callbacks raised is collected, as shutdown makes such errors expected.

    The pool's threads are waited for, not only the tasks the executor tracks: a task goes to
    the pool before the executor records it (car_mpc, whose 3 threads solve, watch and
    reload, printed the error once in CI). Once they have all ended, tasks that never ran are
    cancelled, which closes their coroutines ('coroutine ... was never awaited' at exit).
    """

    def shutdown(self, timeout_sec: Optional[float] = None) -> bool:
        """Stop executing callbacks; wait up to `timeout_sec` for running ones to finish."""
        finished = super().shutdown(timeout_sec)
        pool = self._executor
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        for thread in list(getattr(pool, '_threads', ())):
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            finished = finished and not thread.is_alive()
        # A snapshot, not under `_tasks_lock`: shutdown never waits on the executor's locks.
        tasks = [entry[0] for entry in list(self._tasks)]
        for task in tasks + list(self._futures):
            if task.cancelled():
                continue
            if task.done():
                task.exception()   # mark it retrieved
            elif finished:
                task.cancel()   # never started, and no thread is left to start it
        return finished


def _apply_realtime_priority(node: Node) -> None:
    """Declare `realtime_priority` (every node has it) and apply it; warn if not allowed."""
    declare(node, 'realtime_priority', 0, 'SCHED_FIFO priority of all threads of this node '
            '(1-99; 0: normal scheduling). Cuts the latency tail on a loaded machine; needs '
            'CAP_SYS_NICE or an rtprio limit (docs/continual.md)', 0, 99)
    priority = node.get_parameter('realtime_priority').value
    if not priority:
        return
    try:
        count = set_realtime_priority(priority)
    except OSError as error:   # PermissionError included: run on, with normal scheduling
        node.get_logger().warning(f'realtime_priority {priority} not applied ({error}); '
                                  'running with normal scheduling')
        return
    node.get_logger().info(f'{count} threads run under SCHED_FIFO priority {priority}')


def take_pending(subscription: Subscription) -> Optional[Any]:
    """
    Return the next message already queued for `subscription`, or None; never waits.

    For a callback that drains its queue after a stall: an executor round trip (rebuilding
    the wait set in Python) cost as much as the learner's whole callback at 1 kHz. This is
    the call rclpy's own executors make to take a message (`handle.take_message`, the same in
    Humble and Jazzy).
    """
    try:
        with subscription.handle:
            taken = subscription.handle.take_message(subscription.msg_type, subscription.raw)
    except InvalidHandle:   # destroyed while shutting down
        return None
    except RuntimeError:
        if rclpy.ok():
            raise
        return None   # the context was shut down (SIGINT) during the call
    return None if taken is None else taken[0]


def file_version(path: Path) -> Optional[Tuple[str, int, int]]:
    """
    Return (path, mtime ns, size) of a file, or None once it is gone.

    For nodes that poll a checkpoint folder and refuse a bad file once: a file copied in
    place (scp, cp from the learner's machine) is refused while half-written and must be
    tried again once complete, which its path alone cannot tell. A path that cannot be
    examined (a symlink loop, no permission) gets the version (path, -1, -1): the load then
    fails and is refused once, until the file becomes readable.
    """
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return str(path), -1, -1
    return str(path), stat.st_mtime_ns, stat.st_size
