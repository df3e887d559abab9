"""Stand-in for an executable the Gazebo launch starts: a node that idles until SIGINT."""
import os

import rclpy
from rclpy.executors import ExternalShutdownException
rclpy.init()
node = rclpy.create_node(os.path.basename(__file__).replace('-', '_'))
try:
    rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
finally:
    node.destroy_node()
    rclpy.try_shutdown()
