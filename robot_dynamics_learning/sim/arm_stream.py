"""
The simulated arm computed in a child process, blocks ahead of their publication.

Why: a 50-sample block of the arm simulation is about 5 ms of mostly Python work. In the
process that publishes the samples at their due times, it takes turns with the publisher
for the GIL and the CPU, and samples went out late in every block (latency spikes with the
block's 50 ms period). In a child process the publisher only waits for its clock.

`ArmStream.start()` spawns the child; `next_message()` returns what it sends, in order:
a `SimBlock` for every block, a `SimEvent` for events worth a log line (a scripted payload
change; `error` when the simulation diverged), then `SimEnd` when the simulated duration is
over or the simulation stopped.
`request_payload(mass)` applies from the next block the child simulates (blocks are simulated
up to `ahead` + 1 ahead of publication).
"""
from dataclasses import dataclass
import multiprocessing
import os
import queue
import time
from typing import Any, Callable, List, Optional, Tuple, Union

from robot_dynamics_learning.processes import die_with_parent, start_child
from robot_dynamics_learning.sim.arm import ArmConfig, ArmSamples, ArmSimulator
import torch

START_POLL_S = 0.1   # how often `start` checks whether it was cancelled


@dataclass(frozen=True)
class SimReady:
    """Child -> parent, first: the model is built; its joints."""

    joint_names: Tuple[str, ...]


@dataclass(frozen=True)
class SimBlock:
    """Child -> parent: one simulated block and the payload mass (kg) it ran with."""

    samples: ArmSamples
    payload_kg: float


@dataclass(frozen=True)
class SimEvent:
    """Child -> parent: a line for the log; `error`: the simulation failed."""

    text: str
    error: bool = False


@dataclass(frozen=True)
class SimEnd:
    """Child -> parent, last: the simulated duration is over or the simulation stopped."""


@dataclass(frozen=True)
class SetPayload:
    """Parent -> child: simulate with this payload mass (kg) from the next block on."""

    mass_kg: float


@dataclass(frozen=True)
class StopSimulation:
    """Parent -> child: exit now."""


SimMessage = Union[SimReady, SimBlock, SimEvent, SimEnd]


class ArmStream:
    """Parent-side handle of an `ArmSimulator` running in a child process."""

    def __init__(self, config: ArmConfig, block: int, duration: float = 0.0,
                 schedule: Optional[List[Tuple[float, float]]] = None, ahead: int = 2,
                 threads: int = 1, nice: int = 10) -> None:
        if block < 1 or ahead < 1 or threads < 1:
            raise ValueError(f'block, ahead and threads must be >= 1, got {block}, {ahead}, '
                             f'{threads}')
        context = multiprocessing.get_context('spawn')   # no fork of a process with DDS threads
        self._commands = context.Queue()
        self._messages = context.Queue(maxsize=ahead)
        self._process = context.Process(
            target=_simulate, name='arm_physics', daemon=True,
            args=(config, block, duration, sorted(schedule or []), threads, nice,
                  self._commands, self._messages, os.getpid()))
        self.joint_names: List[str] = []

    def start(self, timeout: float = 120.0,
              cancelled: Callable[[], bool] = lambda: False) -> None:
        """
        Start the child and wait for its joint names (it builds the model first).

        `cancelled` is polled while waiting (e.g. "the node got SIGINT"): then the child is
        stopped and InterruptedError raised, so a start-up of seconds does not outlive Ctrl-C.
        """
        start_child(self._process)
        deadline = time.monotonic() + timeout
        while True:
            if cancelled():
                self.stop()
                raise InterruptedError('arm simulation start cancelled')
            try:
                first = self._messages.get(timeout=START_POLL_S)
                break
            except queue.Empty:
                if time.monotonic() > deadline or not self._process.is_alive():
                    self.stop()
                    raise RuntimeError('arm simulation did not start within '
                                       f'{timeout:.0f} s') from None
        if not isinstance(first, SimReady):
            raise RuntimeError(f'arm simulation did not start: {first.text}')
        self.joint_names = list(first.joint_names)

    def request_payload(self, mass: float) -> None:
        """Change the payload mass (kg) from the next simulated block on."""
        self._commands.put(SetPayload(float(mass)))

    def next_message(self, timeout: float) -> Optional[SimMessage]:
        """Return the next message of the child, or None after `timeout` seconds."""
        try:
            return self._messages.get(timeout=timeout)
        except queue.Empty:
            if not self._process.is_alive():
                return SimEnd()
            return None

    def stop(self) -> None:
        """End the child (it holds no state worth saving)."""
        self._commands.put(StopSimulation())
        self._process.join(timeout=0.5)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=2.0)
        self._commands.cancel_join_thread()


def _simulate(config: ArmConfig, block: int, duration: float,
              schedule: List[Tuple[float, float]], threads: int, nice: int, commands: Any,
              messages: Any, parent_pid: int) -> None:
    """Child: simulate blocks into `messages` (bounded: it waits while the parent is ahead)."""
    die_with_parent(parent_pid)
    os.nice(nice)
    torch.set_num_threads(threads)
    try:
        sim = ArmSimulator(config)
    except (ValueError, OSError) as error:
        messages.put(SimEvent(str(error), error=True))
        return
    messages.put(SimReady(tuple(sim.joint_names)))
    while not duration or sim.time < duration:
        pending = None
        try:
            while True:
                command = commands.get_nowait()
                if isinstance(command, StopSimulation):
                    return
                pending = command.mass_kg
        except queue.Empty:
            pass
        while schedule and schedule[0][0] <= sim.time + 1e-9:
            pending = schedule.pop(0)[1]
            messages.put(SimEvent(f'scripted payload change to {pending} kg at '
                                  f'{sim.time:.2f} s'))
        if pending is not None:
            sim.set_payload(pending)
        try:
            samples = sim.run(block)
        except FloatingPointError as error:
            messages.put(SimEvent(f'simulation stopped: {error}', error=True))
            break
        messages.put(SimBlock(samples, float(sim.payload[0])))
        if os.getppid() != parent_pid:
            return
    messages.put(SimEnd())
