"""
`rdl simulate arm`: run the arm simulator offline and write the stream (npz or rosbag2).

    rdl simulate arm --seconds 60 --payload-schedule 30:2.0 --out arm.mcap
    rdl simulate arm --seconds 60 --out arm.npz --learn lstm

The bag holds /joint_states (position, velocity, effort) at 1 kHz, ready for `bag_player`
and `dynamics_learner`. With --learn the stream is also replayed through the continual
learner exactly as the node runs it (predict, then learn; the settings of
config/learner.yaml's dynamics_learner block, as the node reads them) and the final
prequential nMSE is printed.
"""
import argparse
from pathlib import Path
from typing import List, Tuple

import numpy as np

from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.sim.arm import ArmConfig, ArmSimulator
from robot_dynamics_learning.sim.arm_sim_params import ArmSimConfig
from robot_dynamics_learning.sim.trajectories import MODES
from tqdm import tqdm


def _schedule(text: str) -> List[Tuple[float, float]]:
    """Parse 't1:m1,t2:m2' (s:kg) into sorted pairs; a bad item names itself."""
    pairs = []
    for item in filter(None, text.split(',')):
        try:
            when, mass = (float(v) for v in item.split(':'))
        except ValueError:
            raise ValueError(f"payload schedule item '{item}' is not TIME:MASS") from None
        pairs.append((when, mass))
    return sorted(pairs)


def simulate_arm(seconds: float, schedule: List[Tuple[float, float]], config: ArmConfig,
                 block: int = 50, progress: bool = False) -> Tuple[Trajectory, np.ndarray]:
    """Simulate `seconds`; return the measured Trajectory and the payload (T,) in kg."""
    sim = ArmSimulator(config)
    pending = list(schedule)
    chunks, payload = [], []
    blocks = max(1, int(round(seconds / config.dt / block)))
    for _ in tqdm(range(blocks), disable=not progress, desc='simulate', unit='block',
                  mininterval=1.0):
        while pending and pending[0][0] <= sim.time + 1e-9:
            sim.set_payload(pending.pop(0)[1])
        samples = sim.run(block)
        chunks.append(samples)
        payload += [sim.payload[0]] * block

    def join(name: str) -> np.ndarray:
        return np.concatenate([getattr(c, name)[:, 0] for c in chunks])

    trajectory = Trajectory(time=np.concatenate([c.time for c in chunks]),
                            joint_names=sim.joint_names, q=join('position'),
                            qd=join('velocity'), tau=join('effort'),
                            units={'q': 'rad', 'qd': 'rad/s', 'tau': 'N m'},
                            source=f'sim/arm.py ({config.reference.mode}, payload {schedule})')
    return trajectory, np.array(payload)


def _learn(trajectory: Trajectory, model_type: str) -> None:
    """Replay `trajectory` through the continual learner at config/learner.yaml's settings."""
    from robot_dynamics_learning.learning.continual import (ContinualLearner,
                                                            InverseDynamicsStream)
    from robot_dynamics_learning.learning.learner_params import learner_params
    from robot_dynamics_learning.models.registry import build_model
    from robot_dynamics_learning.signals.causal import CausalDifferentiator

    params = learner_params()   # the node's own settings, read into the node's class
    n = trajectory.q.shape[1]
    learner = ContinualLearner(build_model(model_type, {}, 3 * n, n, n), 3 * n, n, n,
                               params.learner_config(), np.random.default_rng(params.seed))
    stream = InverseDynamicsStream(n, CausalDifferentiator(n, window=params.accel_window))
    for i in range(len(trajectory)):
        features = stream.sample(trajectory.time[i], trajectory.q[i], trajectory.qd[i],
                                 trajectory.tau[i])
        if features is not None:
            learner.observe(trajectory.time[i], *features)
            learner.trainer.train_pending()
        if (i + 1) % 5000 == 0:
            print(f'  {i + 1} samples: prequential nMSE {learner.prequential.nmse():.4f}, '
                  f'{learner.trainer.steps} updates', flush=True)


def _simulate(args: argparse.Namespace) -> int:
    import torch
    torch.set_num_threads(args.threads)
    config = ArmSimConfig(urdf=args.urdf, rate_hz=args.rate, seed=args.seed,
                          payload_mass=args.payload, trajectory=args.trajectory).arm_config()
    trajectory, payload = simulate_arm(args.seconds, _schedule(args.payload_schedule), config,
                                       progress=True)
    out = Path(args.out)
    if out.suffix == '.npz':
        np.savez(out, time=trajectory.time, q=trajectory.q, qd=trajectory.qd,
                 tau=trajectory.tau, payload=payload, names=np.array(trajectory.joint_names))
    else:
        from robot_dynamics_learning.data.bag_io import write_joint_trajectories
        storage = 'sqlite3' if out.suffix == '.db3' or args.storage == 'sqlite3' else 'mcap'
        write_joint_trajectories(out, [trajectory], storage=storage)
    print(f'wrote {len(trajectory)} samples ({args.seconds:g} s at {args.rate:g} Hz, '
          f'{len(trajectory.joint_names)} joints) to {out}')
    if args.learn:
        _learn(trajectory, args.learn)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `rdl simulate arm`."""
    simulate = subparsers.add_parser('simulate', help='run a built-in simulator offline')
    commands = simulate.add_subparsers(dest='simulator', metavar='SIMULATOR', required=True)
    arm = commands.add_parser('arm', help='7-DoF arm with friction, elasticity, payload')
    arm.add_argument('--seconds', type=float, default=60.0, help='simulated time (s)')
    arm.add_argument('--rate', type=float, default=ArmSimConfig.rate_hz, help='sample rate (Hz)')
    arm.add_argument('--trajectory', choices=MODES, default=ArmSimConfig.trajectory,
                     help='reference')
    arm.add_argument('--payload', type=float, default=ArmSimConfig.payload_mass,
                     help='initial payload (kg)')
    arm.add_argument('--payload-schedule', default='',
                     help="payload changes 'TIME:MASS,...' in s and kg, e.g. '30:2.0'")
    arm.add_argument('--urdf', default=ArmSimConfig.urdf, help="arm URDF ('' = urdf/panda.urdf)")
    arm.add_argument('--seed', type=int, default=ArmSimConfig.seed,
                     help='trajectory and noise seed')
    arm.add_argument('--out', required=True,
                     help='output: .npz, or a rosbag2 folder (MCAP; .db3 or --storage sqlite3)')
    arm.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap')
    arm.add_argument('--learn', default='', help='also replay through the continual learner '
                     'with this model type (e.g. lstm) and print the prequential nMSE')
    arm.add_argument('--threads', type=int, default=1, help='torch threads')
    arm.set_defaults(func=_simulate)
