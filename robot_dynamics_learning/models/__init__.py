"""Learned dynamics models sharing the `DynamicsModel` interface."""
