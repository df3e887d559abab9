"""Filtering and differentiation: zero-phase offline, causal with bounded delay online."""
