"""
Stand-in for ros_gz_bridge's parameter_bridge in the Gazebo launch test (no Gazebo here).

Checks the bridge arguments car_sim.launch.py passes, then plays a kinematic car at the
$RDL_STANDIN_START pose: /clock and the pose in sim time (100 s after start, as gz sim
would stamp them), moved by the bridged cmd_vel.
"""
import math
import os
import sys
import time

from geometry_msgs.msg import PoseStamped, Twist
import rclpy
from rclpy.executors import ExternalShutdownException
from rosgraph_msgs.msg import Clock

EXPECTED = {'/model/rc_car/pose@geometry_msgs/msg/PoseStamped[gz.msgs.Pose',
            '/model/rc_car/cmd_vel@geometry_msgs/msg/Twist]gz.msgs.Twist',
            '/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock'}
bridges = {a for a in sys.argv[1:] if '@' in a}
if bridges != EXPECTED:
    sys.exit(f'unexpected bridge arguments {sorted(bridges)}')
rclpy.init(args=sys.argv)
node = rclpy.create_node('parameter_bridge')
clock = node.create_publisher(Clock, '/clock', 10)
pose = node.create_publisher(PoseStamped, '/model/rc_car/pose', 10)
x, y, yaw = (float(v) for v in os.environ['RDL_STANDIN_START'].split(','))
state = {'x': x, 'y': y, 'yaw': yaw, 'v': 0.0, 'w': 0.0}


def on_command(msg: Twist) -> None:
    state['v'], state['w'] = msg.linear.x, msg.angular.z


node.create_subscription(Twist, '/model/rc_car/cmd_vel', on_command, 10)
begin = time.monotonic()


def tick() -> None:
    sim = time.monotonic() - begin + 100.0    # sim time: 100 s after gz start, not wall time
    state['x'] += 0.01 * state['v'] * math.cos(state['yaw'])
    state['y'] += 0.01 * state['v'] * math.sin(state['yaw'])
    state['yaw'] += 0.01 * state['w']
    stamp = rclpy.time.Time(nanoseconds=int(sim * 1e9)).to_msg()
    clock.publish(Clock(clock=stamp))
    msg = PoseStamped()
    msg.header.stamp = stamp
    msg.header.frame_id = 'world'
    msg.pose.position.x, msg.pose.position.y = state['x'], state['y']
    msg.pose.orientation.z = math.sin(state['yaw'] / 2)
    msg.pose.orientation.w = math.cos(state['yaw'] / 2)
    pose.publish(msg)


node.create_timer(0.01, tick)
try:
    rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
except RuntimeError:   # a take racing the SIGINT shutdown of the context (seen in CI at exit)
    if rclpy.ok():
        raise
finally:
    node.destroy_node()
    rclpy.try_shutdown()
