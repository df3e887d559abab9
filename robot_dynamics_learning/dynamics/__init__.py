"""Differentiable, batched rigid-body dynamics from URDF (FK, Jacobians, RNEA, CRBA, ABA)."""
from .algorithms import (aba, coriolis_torques, crba, forward_kinematics, gravity_torques,
                         jacobian, link_pose, rnea)
from .identify import IdentificationResult, identify
from .learnable import LearnableRigidBody, LogCholeskyInertia
from .model import (DynamicsParams, JOINT_PRISMATIC, JOINT_REVOLUTE, JointLimits, load_urdf,
                    RobotModel, URDFError)

__all__ = [
    'aba', 'coriolis_torques', 'crba', 'DynamicsParams', 'forward_kinematics',
    'gravity_torques', 'IdentificationResult', 'identify', 'jacobian', 'JOINT_PRISMATIC',
    'JOINT_REVOLUTE', 'JointLimits', 'LearnableRigidBody', 'link_pose', 'load_urdf',
    'LogCholeskyInertia', 'rnea', 'RobotModel', 'URDFError',
]
