"""`rdl` itself: the help lists every command without importing torch."""
import subprocess
import sys

from robot_dynamics_learning.cli import build_parser, COMMANDS


def test_help_lists_every_command_without_importing_torch():
    code = ('import sys\n'
            'from robot_dynamics_learning.cli import main\n'
            'try:\n'
            "    main(['--help'])\n"
            'except SystemExit:\n'
            '    pass\n'
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().endswith('False')
    for name, (_, text) in COMMANDS.items():
        assert name in out and text.split()[0] in out


def test_command_table_matches_what_the_modules_register():
    parser = build_parser()
    registered = parser._subparsers._group_actions[0].choices
    assert set(registered) == set(COMMANDS)
    for name in COMMANDS:
        assert set(build_parser(name)._subparsers._group_actions[0].choices) >= {name}


def test_bag_export_output_feeds_identify(tmp_path):
    """`rdl bag export --format npz` gives identify the same samples as the bag itself."""
    from robot_dynamics_learning.cli import main
    from robot_dynamics_learning.data import bag_io
    from robot_dynamics_learning.dynamics.model import load_urdf
    from robot_dynamics_learning.learning.identify_cli import load_samples
    from robot_dynamics_learning.sim.arm import find_urdf
    import numpy as np

    trajectory = bag_io.load_dataset('kinova', 'RunTrajectory1.csv')[0].segment(0, 400)
    bag = tmp_path / 'kinova'
    bag_io.write_joint_trajectories(bag, [trajectory], 'mcap')
    exported = tmp_path / 'js.npz'
    assert main(['bag', 'export', str(bag), '--topic', '/joint_states', '--out',
                 str(exported)]) == 0
    model = load_urdf(find_urdf('kinova_gen3.urdf'))
    from_npz, npz_test = load_samples([str(exported)], model)
    from_bag, bag_test = load_samples([str(bag)], model)
    for a, b in zip(from_npz + npz_test, from_bag + bag_test):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([from_npz[3], npz_test[3]]), trajectory.tau)


def test_car_lap_drives_with_car_mpcs_settings_from_the_params_file(tmp_path, monkeypatch):
    """`rdl car lap` reads the car_mpc block of a ROS params YAML, as the node does."""
    from robot_dynamics_learning.cli import main
    from robot_dynamics_learning.control import cli as car_cli
    params = tmp_path / 'car.yaml'
    params.write_text('car_mpc:\n  ros__parameters:\n    iterations: 2\n    candidates: 24\n'
                      '    refine_candidates: 8\n    target_speed: 1.2\n    throttle_min: 0.0\n')
    seen = {}

    def drive_laps(*args, **kwargs):
        seen.update(kwargs)
        return {}

    monkeypatch.setattr(car_cli, 'drive_laps', drive_laps)
    assert main(['car', 'lap', '--params', str(params)]) == 0
    assert (seen['iterations'], seen['candidates'], seen['refine_candidates']) == (2, 24, 8)
    assert seen['mpc_config'].target_speed == 1.2
    assert seen['mpc_config'].throttle_limits == (0.0, 1.0)
    assert main(['car', 'lap', '--params', str(params), '--target-speed', '0.8']) == 0
    assert seen['mpc_config'].target_speed == 0.8
