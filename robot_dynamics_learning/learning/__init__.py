"""Streaming buffers, the continual trainer, checkpoints, metrics and losses."""
