"""Thin rclpy nodes: the only place rclpy and message packages are imported."""
