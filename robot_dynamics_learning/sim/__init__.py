"""Built-in simulators: 7-DoF arm with unmodelled effects, RC car with drift."""
