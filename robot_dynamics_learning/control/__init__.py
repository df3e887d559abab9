"""Costs, gradient-based trajectory optimisation and receding-horizon MPC."""
