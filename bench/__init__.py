"""Benchmarks run by `make bench`; each process keeps freed memory like our nodes do."""
from robot_dynamics_learning.memory import retain_freed_memory

retain_freed_memory()
