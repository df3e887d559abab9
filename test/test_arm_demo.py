"""make demo's arm-control part: the three controllers on MuJoCo, the plot and the numbers."""
import math

from robot_dynamics_learning.control import arm_demo
from robot_dynamics_learning.demo import arm_control_summary


def test_short_run_compares_the_three_controllers_and_plots(tmp_path):
    result = arm_demo.run(tmp_path, seconds=3.0, change_s=2.0, payload_kg=1.0)
    controllers = result['controllers']
    assert set(controllers) == {'none', 'urdf', 'learned'}
    for run in controllers.values():
        assert math.isfinite(run['rmse_before_change_rad']) and run['rmse_before_change_rad'] > 0
    # URDF feed-forward already beats PD alone by far (MuJoCo's friction is not in the URDF)
    assert controllers['urdf']['rmse_before_change_rad'] \
        < 0.5 * controllers['none']['rmse_before_change_rad']
    assert (tmp_path / 'arm_control.png').stat().st_size > 10_000
    lines = arm_control_summary(result, tmp_path / 'arm_control.png')
    assert lines[1].startswith('learned beats PD only') and lines[1].endswith('met')
