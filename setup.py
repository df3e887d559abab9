"""ament_python package definition for robot_dynamics_learning."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = 'robot_dynamics_learning'

NODES = [
    'bag_player',
    'arm_sim',
    'dynamics_learner',
    'torque_predictor',
    'replay_evaluator',
    'car_sim',
    'car_state_estimator',
    'car_model_learner',
    'car_mpc',
    'mujoco_arm',
    'arm_controller',
]

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*', 'bench', 'bench.*']),
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
        (f'share/{PACKAGE}/launch', glob('launch/*launch.[pxy][yma]*')),
        (f'share/{PACKAGE}/config', glob('config/*.yaml')),
        (f'share/{PACKAGE}/config/tracks', glob('config/tracks/*.yaml')),
        (f'share/{PACKAGE}/config/models',
         glob('config/models/*.pt') + glob('config/models/*.yaml')),
        (f'share/{PACKAGE}/urdf', glob('urdf/*.urdf') + glob('urdf/*.xacro')),
        (f'share/{PACKAGE}/worlds', glob('worlds/*.sdf')),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='robot_dynamics_learning developers',
    maintainer_email='dev@robot-dynamics-learning.org',
    description='Online learning of robot dynamics and control through learned models (ROS 2).',
    license='Apache-2.0',
    extras_require={'test': ['pytest']},
    entry_points={
        'console_scripts': [
            f'{name} = {PACKAGE}.nodes.{name}:main' for name in NODES
        ] + [f'rdl = {PACKAGE}.cli:main'],
    },
)
