"""Differentiable, batched rigid-body dynamics from URDF (FK, Jacobians, RNEA, CRBA, ABA)."""
