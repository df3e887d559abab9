"""The settings of replay_evaluator: one class for the node and bag_replay.launch.py."""
from dataclasses import dataclass
from typing import Tuple

from robot_dynamics_learning.params import check_ranges, setting


@dataclass(frozen=True)
class ReplayEvaluatorConfig:
    """Parameters of replay_evaluator (docs/replay.md)."""

    out: str = setting('replay_report', 'report folder (report.md, metrics.json, PNGs)')
    learners: Tuple[str, ...] = setting(('dynamics_learner',), 'learner node names (or '
                                        'namespaced paths) whose ~/predicted_torques are '
                                        'scored')
    end_topic: str = setting('/bag_player/end_of_bag', 'std_msgs/Empty that ends it')
    settle_s: float = setting(10.0, 'after the end of the bag, seconds without a new '
                              'prediction after which the report is written although a '
                              'learner has not predicted the last message (it rejected it, '
                              'or died); a learner still working through its backlog keeps '
                              'it waiting', 0.0, 600.0)
    urdf: str = setting('', 'URDF for the rigid-body baseline (empty: none)')
    params_file: str = setting('', 'learner params YAML for the report settings (empty: '
                               'config/learner.yaml)')

    def __post_init__(self) -> None:
        """Refuse values outside their ranges, naming them."""
        check_ranges(self)
