"""Trajectories, shared real-data loaders, windowing and rosbag2 I/O (no ROS install needed)."""
