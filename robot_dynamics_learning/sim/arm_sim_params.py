"""
The settings of arm_sim: one class for the node, config/arm_sim.yaml and `rdl simulate arm`.

The node declares its parameters from `ArmSimConfig`; `rdl simulate arm` takes its defaults
from the same class, so the simulated arm is the same one offline and as a node.
"""
from dataclasses import dataclass
from typing import List, Optional, Tuple

from robot_dynamics_learning.params import check_ranges, setting
from robot_dynamics_learning.sim.arm import ArmConfig
from robot_dynamics_learning.sim.trajectories import MODES, ReferenceConfig


@dataclass(frozen=True)
class ArmSimConfig:
    """Parameters of arm_sim (config/arm_sim.yaml documents each one)."""

    urdf: str = setting(ArmConfig.urdf, 'arm URDF path (empty: the package urdf/panda.urdf)')
    rate_hz: float = setting(1000.0, 'sample (and publish) rate; the simulation integrates in '
                             'steps of at most 1 ms', 1.0, 10000.0)
    real_time_factor: float = setting(1.0, 'simulated seconds per wall second (0: as fast as '
                                      'possible)', 0.0, 100.0)
    block: int = setting(50, 'samples simulated ahead per block (larger: fewer, bigger '
                         'batched torch calls per sample; payload changes apply from the next '
                         'block)', 1, 100000)
    torch_threads: int = setting(1, 'torch intra-op threads of the simulation (1: its small '
                                 'batched calls run about 10x slower split over two threads '
                                 'on a 2-core CPU)', 1, 64)
    trajectory: str = setting('excitation', f'reference trajectory, one of {MODES}')
    payload_mass: float = setting(ArmConfig.payload_mass, 'payload at the flange (kg); may '
                                  'change at run time', 0.0, 50.0, dynamic=True)
    payload_com: Tuple[float, ...] = setting(ArmConfig.payload_com, 'payload centre of mass '
                                             'in the flange frame (m)')
    noise_position: float = setting(ArmConfig.noise_position, 'position noise standard '
                                    'deviation (rad)', 0.0, 1e3)
    noise_velocity: float = setting(ArmConfig.noise_velocity, 'velocity noise standard '
                                    'deviation (rad/s)', 0.0, 1e3)
    noise_effort: float = setting(ArmConfig.noise_effort, 'effort noise standard deviation '
                                  '(N m)', 0.0, 1e3)
    publish_command: bool = setting(False, 'also publish the motor torque on command_topic')
    command_topic: str = setting('/effort_controller/commands', 'torque command topic')
    duration_s: float = setting(0.0, 'stop publishing after this many simulated seconds (0: '
                                'never)', 0.0, 1e9)
    seed: int = setting(ArmConfig.seed, 'random seed of the trajectory and the sensor noise')
    payload_schedule: Optional[Tuple[float, ...]] = setting(
        None, 'scripted payload changes [t1, mass1, t2, mass2, ...] (simulated s, kg); unset: '
        'none', unset_type='double_array')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them."""
        check_ranges(self)
        if self.trajectory not in MODES:
            raise ValueError(f'trajectory must be one of {MODES}, got {self.trajectory!r}')
        if len(self.payload_schedule or ()) % 2:
            raise ValueError(f'payload_schedule needs (time, mass) pairs, got '
                             f'{list(self.payload_schedule)}')

    def schedule(self) -> List[Tuple[float, float]]:
        """Return the scripted payload changes as (simulated s, kg) pairs."""
        values = list(self.payload_schedule or ())
        return list(zip(values[::2], values[1::2]))

    def arm_config(self) -> ArmConfig:
        """Return the simulator's settings."""
        return ArmConfig(urdf=self.urdf, dt=1.0 / self.rate_hz,
                         noise_position=self.noise_position,
                         noise_velocity=self.noise_velocity, noise_effort=self.noise_effort,
                         payload_mass=self.payload_mass, payload_com=tuple(self.payload_com),
                         seed=self.seed,
                         reference=ReferenceConfig(mode=self.trajectory, seed=self.seed))
