"""
The settings of car_mpc: one class for the node and its block in config/car.yaml.

The node declares its parameters from `CarMPCConfig` (default, description, range of every
field), and `params.load_node_config` reads the YAML block into the same class.
"""
from dataclasses import dataclass
import math

from robot_dynamics_learning.control.mpc import MPCConfig
from robot_dynamics_learning.control.optimizer import SOLVERS
from robot_dynamics_learning.params import check_ranges, setting


@dataclass(frozen=True)
class CarMPCConfig:
    """Parameters of car_mpc (config/car.yaml documents each one)."""

    track_file: str = setting('config/tracks/oval.yaml', 'race track YAML (control/track.py)')
    checkpoint: str = setting('config/models/car_mlp_sim.pt', 'car model checkpoint (used '
                              'when checkpoint_dir is empty or holds none yet)')
    checkpoint_dir: str = setting('', 'folder of car_model_learner checkpoints; the newest is '
                                  'loaded and re-checked every reload_period_s (empty: none)')
    reload_period_s: float = setting(5.0, 'how often checkpoint_dir is checked (s)', 0.5,
                                     3600.0)
    rate_hz: float = setting(20.0, 'control rate (the model step h should equal 1 / rate_hz)',
                             1.0, 200.0)
    horizon: int = setting(MPCConfig.horizon, 'optimised steps', 2, 200)
    target_speed: float = setting(MPCConfig.target_speed, 'speed along the track (m/s)', 0.05,
                                  10.0)
    solver: str = setting('line_search', f'trajectory optimiser: {list(SOLVERS)} (line_search: '
                          'seed 003, gradient step + batched line search; ipopt: IPOPT via '
                          'CasADi on the same cost, docs/results_car.md compares them)')
    iterations: int = setting(3, 'solver iterations per tick', 1, 100)
    candidates: int = setting(32, 'line-search step sizes per iteration (line_search; the '
                              'coarse ones when refine_candidates > 0)', 1, 4096)
    refine_candidates: int = setting(16, 'finer step sizes around the best coarse one '
                                     '(line_search; 0: one batch of candidates, as seed 003 '
                                     'with 512)', 0, 4096)
    budget_s: float = setting(MPCConfig.budget_s, 'compute budget per tick (s); iterations '
                              'that would end after 70 % of it are skipped', 0.001, 1.0)
    degrade: bool = setting(True, 'over budget, drive on the best plan so far (or the shifted '
                            'previous plan) instead of braking; false: a late tick brakes')
    stale_timeout_s: float = setting(0.1, 'brake when no state arrived for this long (s)',
                                     0.01, 5.0)
    throttle_min: float = setting(-1.0, 'lowest throttle command', -1.0, 1.0)
    throttle_max: float = setting(1.0, 'highest throttle command', -1.0, 1.0)
    steering_limit: float = setting(1.0, 'largest |steering| command', 0.0, 1.0)
    brake_throttle: float = setting(0.0, 'throttle of the brake command (steering 0)', -1.0,
                                    1.0)
    throttle_scale: float = setting(1.0, 'Twist linear.x = throttle / throttle_scale')
    steering_scale: float = setting(1.0, 'Twist angular.z = steering / steering_scale')
    publish_gz_cmd: bool = setting(False, 'also publish cmd_vel_gz (speed, yaw rate) for '
                                   'Gazebo')
    compile: bool = setting(  # noqa: A003 - the parameter's name in car.yaml and launch files
        False, 'torch.compile the cost (faster; the first start compiles for a minute or more)')
    torch_threads: int = setting(1, 'torch intra-op threads', 1, 64)
    line_search_threads: int = setting(0, 'threads sharing the batched line-search rollouts '
                                       '(2 where a second core is free: about 1.6x faster '
                                       'line searches; 0: 2 with 4 or more usable cores, '
                                       'else 1)', 0, 64)
    delay_compensation: bool = setting(True, 'plan from the state predicted (model plus the '
                                       'committed command) at the time the command will '
                                       'apply: the state age plus the expected solve time '
                                       'plus actuation_delay_s')
    actuation_delay_s: float = setting(0.0, 'transport and actuation delay added to the '
                                       'predicted latency (s)', 0.0, 0.5)
    grip_weight: float = setting(MPCConfig.grip_weight, 'weight of the lateral-acceleration '
                                 'bound: predicted |vx r| above (1 - grip_margin) x the '
                                 'surface limit is penalised quadratically (0: off)', 0.0,
                                 1e6)
    lateral_accel_max: float = setting(0.0, 'the surface limit (m/s^2) until car/grip (the '
                                       'online estimate of car_model_learner) gives one (0: '
                                       'none, the bound waits for the estimate)', 0.0, 100.0)
    grip_margin: float = setting(MPCConfig.grip_margin, 'share of the surface limit kept in '
                                 'reserve by the bound', 0.0, 0.9)
    grip_lever: float = setting(0.087, 'centre of mass to front axle (m; the DART car and '
                                'car_sim: 0.087): the bound adds grip_lever x |dr/dt| (the '
                                'turn-in) to |vx r| (0: the lateral acceleration alone)', 0.0,
                                10.0)
    grip_speed_profile: bool = setting(True, 'with the grip bound active, each predicted '
                                       "step's speed target follows the track's speed "
                                       'profile for the bounded acceleration (the corner '
                                       'speed on the inside line, braked down to before '
                                       'the turn: the MPC slows before a turn, not in it)')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them."""
        check_ranges(self)
        if self.solver not in SOLVERS:
            raise ValueError(f'solver must be one of {list(SOLVERS)}, got {self.solver!r}')

    def mpc_config(self) -> MPCConfig:
        """Return the MPC's own settings (limits, brake command, budget)."""
        return MPCConfig(horizon=self.horizon, target_speed=self.target_speed,
                         throttle_limits=(self.throttle_min, self.throttle_max),
                         steering_limits=(-self.steering_limit, self.steering_limit),
                         brake_command=(self.brake_throttle, 0.0), budget_s=self.budget_s,
                         compiled=self.compile, degrade=self.degrade,
                         line_search_threads=self.line_search_threads,
                         grip_weight=self.grip_weight, grip_margin=self.grip_margin,
                         grip_lever=self.grip_lever,
                         grip_speed_profile=self.grip_speed_profile,
                         lateral_accel_max=self.lateral_accel_max or math.inf)
