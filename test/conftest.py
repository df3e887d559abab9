"""Shared pytest setup: an isolated ROS 2 domain on localhost for every test run."""
import logging
import os

import pytest

# Set before any test imports rclpy: a domain of our own (derived from the pid so parallel runs
# on one machine do not hear each other), discovery on localhost only, Fast DDS.
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')

# launch_testing's pytest plugin imports `launch`, whose logging module makes every logger
# created afterwards a non-propagating LaunchLogger: records of our modules would then never
# reach the root logger (caplog saw nothing). The launch tests run launch in subprocesses.
logging.setLoggerClass(logging.Logger)


@pytest.fixture(scope='module')
def one_torch_thread():
    """
    Run a module with one intra-op thread, as the car_mpc node does (torch_threads 1).

    With two threads on a loaded 2-core machine the small per-step operations of an MPC
    solve wait on each other (measured: about 1 s instead of 30-60 ms per solve). Modules
    take it with `pytestmark = pytest.mark.usefixtures('one_torch_thread')`.
    """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
