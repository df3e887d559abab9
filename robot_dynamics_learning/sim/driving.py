"""
Simulated data collection: random human-like driving seen through emulated motion capture.

The result has the shape of the real DART recordings (observations [x, y, yaw wrapped] from
mocap, actions [throttle, steering]) so that one pipeline (`data.car_datasets.car_dataset`)
serves both.
"""
from typing import List

import numpy as np

from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.sim.car import (CarParams, collect_driving, DrivingStyle,
                                             emulate_mocap, MocapNoise, reset_indices)


def simulated_drives(duration_s: float, params: CarParams, noise: MocapNoise, seed: int,
                     cars: int = 8, style: DrivingStyle = DrivingStyle()) -> List[Trajectory]:
    """
    Drive `cars` cars for duration_s / cars seconds each and record them as mocap would.

    The simulator runs at the mocap rate (params.dt is replaced by 1 / noise.rate_hz); frames
    lost to dropouts are missing from the result; drives are split at arena resets.
    """
    rng = np.random.default_rng(seed)
    params = CarParams(**{**params.__dict__, 'dt': 1.0 / noise.rate_hz})
    time, states, commands = collect_driving(duration_s / cars, params, rng, cars=cars,
                                             style=style)
    drives = []
    for car in range(cars):
        bounds = [0, *(reset_indices(states[car], params.dt) + 1).tolist(), len(time)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b - a < int(2.0 / params.dt):
                continue
            valid, poses = emulate_mocap(states[car, a:b], noise, rng)
            drives.append(Trajectory(
                time=time[a:b][valid], observations=poses[valid],
                actions=commands[car, a:b][valid],
                units={'observations': 'm, m, rad', 'actions': 'throttle, steering [-1, 1]'},
                source=f'simulated car {car} seed {seed} [{a}:{b}]'))
    return drives
