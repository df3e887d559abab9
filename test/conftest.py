"""Shared pytest setup: an isolated ROS 2 domain on localhost for every test run."""
import logging
import os

# Set before any test imports rclpy: a domain of our own (derived from the pid so parallel runs
# on one machine do not hear each other), discovery on localhost only, Fast DDS.
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')

# launch_testing's pytest plugin imports `launch`, whose logging module makes every logger
# created afterwards a non-propagating LaunchLogger: records of our modules would then never
# reach the root logger (caplog saw nothing). The launch tests run launch in subprocesses.
logging.setLoggerClass(logging.Logger)
