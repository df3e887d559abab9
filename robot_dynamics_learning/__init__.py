"""Online learning of robot dynamics from streamed sensor data, and control through it."""

__version__ = '0.1.0'
