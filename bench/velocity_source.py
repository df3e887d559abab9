"""
What learning loses when the driver publishes positions only (`velocity_source`).

The same real recordings replayed twice through `rdl replay`'s node path: once with the
recorded JointState velocity, once with the velocity array left empty, so the learner
differentiates the positions (`data/joint_velocity.VelocitySource`, one-sided quadratic fit
over `velocity_window` samples at the newest stamp). Kinova Gen3 (1 kHz, the training
recordings) and Schunk LWA 4P (250 Hz, runs 0-5, torques on the command topic); LSTM and FFNN
at config/learner.yaml's settings, every 5th of 20 blocks held out, seed 0. Reported per source:
held-out nMSE of each model and the baselines, and the derived velocity's RMS difference
from the recorded one relative to its spread. Needs ../shared/data. Writes
bench/results/velocity_source.json.
"""
import dataclasses
import json
from pathlib import Path
import tempfile

import numpy as np
from robot_dynamics_learning.data import bag_io
from robot_dynamics_learning.learning import replay, report

RESULTS = Path(__file__).resolve().parent / 'results' / 'velocity_source.json'
MODELS = ['lstm', 'ffnn']
WINDOWS = (9, 15, 21)
SETS = {'kinova': ('train', {}),
        'schunk': ('0:6', {'command_topic': bag_io.SCHUNK_COMMAND_TOPIC, 'effort': False})}


def _replay(bag: Path, params: dict, window: int = 15) -> tuple:
    """Return (stream, held-out nMSE per run) for one bag at one velocity window."""
    params = dict(params, velocity_window=window)
    stream = replay.read_joint_stream(bag, velocity_window=window)
    holdout = replay.Holdout.parse('every:5', stream.duration_s / 20)   # rdl replay's blocks
    result = replay.replay(stream, MODELS, None, params, holdout, seed=0)
    metrics = report.compute_metrics(result)['models']
    return stream, {name: m['held_out']['nmse'] for name, m in metrics.items()}


def main() -> None:
    """Replay each set with recorded and with differentiated velocities; write the JSON."""
    params = replay.load_learner_params()
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, (item, options) in SETS.items():
            runs = bag_io.load_dataset(name, item)
            measured_bag, positions_bag = Path(folder) / f'{name}_v', Path(folder) / f'{name}_q'
            bag_io.write_joint_trajectories(measured_bag, runs, 'mcap', **options)
            bag_io.write_joint_trajectories(
                positions_bag, [dataclasses.replace(r, qd=None, qdd=None) for r in runs],
                'mcap', **options)
            measured, scores = _replay(measured_bag, params)
            rows = {'measured': {'nmse': scores}}
            for window in WINDOWS:
                derived, scores = _replay(positions_bag, params, window)
                recorded = measured.qd[np.isin(measured.receive_s, derived.receive_s)]
                error = derived.qd - recorded
                rows[f'positions_{window}'] = {
                    'nmse': scores,
                    'qd_relative_rms': np.sqrt((error ** 2).mean(0) / recorded.var(0)).tolist()}
            out[name] = {'samples': len(measured), 'rate_hz': measured.rate_hz, **rows}
            for source, row in rows.items():
                print(name, source, {k: round(v, 4) for k, v in row['nmse'].items()},
                      np.round(row.get('qd_relative_rms', []), 3))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
