"""Shared pytest setup: an isolated ROS 2 domain on localhost for every test run."""
import os

# Set before any test imports rclpy: a domain of our own (derived from the pid so parallel runs
# on one machine do not hear each other), discovery on localhost only, Fast DDS.
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
