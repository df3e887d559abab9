"""Stand-in for ros_gz_sim's gz_sim.launch.py: takes gz_args, starts nothing."""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument


def generate_launch_description() -> LaunchDescription:
    """Declare gz_args only."""
    return LaunchDescription([DeclareLaunchArgument('gz_args', default_value='')])
