"""The settings of bag_player: one class for the node and the launch files that start it."""
from dataclasses import dataclass
from typing import Tuple

from robot_dynamics_learning.data.bag_io import TYPESTORES
from robot_dynamics_learning.params import check_ranges, setting


@dataclass(frozen=True)
class BagPlayerConfig:
    """Parameters of bag_player (docs/replay.md)."""

    bag: str = setting('', 'rosbag2 folder to play (sqlite3 or MCAP); required by the node')
    rate: float = setting(1.0, 'playback speed factor: 2.0 plays twice as fast', 0.01, 1000.0)
    loop: bool = setting(False, 'start again from the beginning at the end')
    publish_clock: bool = setting(False, 'publish the bag time on /clock (for use_sim_time '
                                  'nodes)')
    clock_frequency: float = setting(100.0, 'most /clock messages per second of bag time (Hz)',
                                     1.0, 10000.0)
    topics: Tuple[str, ...] = setting(('',), "topics to play; [''] plays every topic")
    start_offset: float = setting(0.0, 'skip this many seconds from the start of the bag', 0.0,
                                  1e9)
    exit_at_end: bool = setting(True, 'shut down after the last message (false: stay up, '
                                'idle)')
    wait_for_subscribers: int = setting(0, 'before playing, wait until every played topic has '
                                        'this many subscriptions (reliable delivery from the '
                                        'first message)', 0, 100)
    queue_depth: int = setting(1000, 'history depth hint of the reliable keep-all publishers',
                               1, 100000)
    progress_period: float = setting(2.0, 'seconds between progress log lines', 0.01, 3600.0)
    stamp_unstamped: bool = setting(True, 'publish a message whose header stamp is 0 stamped '
                                    'with its bag log time, as `rdl replay` times it offline '
                                    '(false: the bytes as recorded)')
    typestore: str = setting('jazzy', f'types for bags without definitions: {sorted(TYPESTORES)}')

    def __post_init__(self) -> None:
        """Refuse values that cannot work, naming them."""
        check_ranges(self)
        if self.typestore not in TYPESTORES:
            raise ValueError(f'typestore must be one of {sorted(TYPESTORES)}, got '
                             f'{self.typestore!r}')
