"""
One offline evaluation of an inverse-dynamics model, shared by `rdl train/evaluate` and benches.

Every report carries the previous-value baseline (repeat the measured tau(t-1)) and the nMSE of
the torque change, because at 250 Hz-1 kHz a model fed tau(t-1) can look perfect by copying
it; calibration where the model gives a variance; and the inputs that leave the training
ranges, where every learned model fails.
"""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from robot_dynamics_learning.data.trajectory import Trajectory
from robot_dynamics_learning.data.windows import inverse_dynamics_arrays, whole_sequence
from robot_dynamics_learning.learning.metrics import (calibration, change_nmse_per_output,
                                                      coverage_warnings, inverse_input_names,
                                                      nmse_per_output, predict_with_variance,
                                                      quiet_targets, range_coverage,
                                                      rmse_per_output)
from robot_dynamics_learning.models.base import DynamicsModel


def predict_inverse(model: DynamicsModel, test: Sequence[Trajectory]) -> Dict[str, np.ndarray]:
    """
    Predict whole test recordings from a zero state.

    Returns 'prediction', 'variance' (or None), 'target', 'previous' (measured tau(t-1)),
    'inputs' ([q, qd, qdd]) and 'increment' (tau(t-1) plus the model's own predicted change
    prediction(t) - prediction(t-1): any absolute model turned into one fed tau(t-1)), each
    (N, .) over the recordings in order.
    """
    keys = ('prediction', 'variance', 'target', 'previous', 'inputs', 'increment')
    out: Dict[str, List[np.ndarray]] = {k: [] for k in keys}
    for trajectory in test:
        arrays = inverse_dynamics_arrays(trajectory)
        mean, variance = predict_with_variance(model, whole_sequence(arrays))
        prediction = mean[0].double().numpy()
        out['prediction'].append(prediction)
        change = np.diff(prediction, axis=0, prepend=prediction[:1])
        out['increment'].append(arrays[1] + change)
        out['variance'].append(None if variance is None else variance[0].double().numpy())
        out['inputs'].append(arrays[0])
        out['previous'].append(arrays[1])
        out['target'].append(arrays[2])
    joined = {k: np.concatenate(v) for k, v in out.items() if k != 'variance'}
    has_variance = all(v is not None for v in out['variance'])
    joined['variance'] = np.concatenate(out['variance']) if has_variance else None
    return joined


def score_inverse(predicted: Dict[str, np.ndarray], scored: Optional[Sequence[int]] = None
                  ) -> Dict[str, Any]:
    """
    Metrics of one prediction: per-joint RMSE, nMSE and change nMSE; calibration if any.

    scored: the joints averaged into 'mean_nmse' and 'mean_change_nmse' (all by default).
    """
    prediction, target, previous = (predicted[k] for k in ('prediction', 'target', 'previous'))
    nmse = nmse_per_output(prediction, target)
    change = change_nmse_per_output(prediction, target, previous)
    index = list(range(target.shape[1])) if scored is None else list(scored)
    out = {'rmse': rmse_per_output(prediction, target).tolist(), 'nmse': nmse.tolist(),
           'change_nmse': change.tolist(), 'mean_nmse': float(np.nanmean(nmse[index])),
           'mean_change_nmse': float(np.nanmean(change[index]))}
    if predicted.get('variance') is not None:
        out['calibration'] = calibration(prediction[:, index], predicted['variance'][:, index],
                                         target[:, index])
    return out


def inverse_report(model: DynamicsModel, train: Sequence[Trajectory],
                   test: Sequence[Trajectory], scored: Optional[Sequence[int]] = None,
                   predicted: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, Any]:
    """
    Score `model` and the previous-value baseline on `test`; add the coverage warnings.

    predicted: `predict_inverse(model, test)` where the caller has it already.
    """
    predicted = predict_inverse(model, test) if predicted is None else predicted
    baseline = dict(predicted, prediction=predicted['previous'], variance=None)
    train_arrays = [inverse_dynamics_arrays(t) for t in train]
    train_inputs = np.concatenate([arrays[0] for arrays in train_arrays])
    coverage = range_coverage(train_inputs, predicted['inputs'])
    joints = test[0].joint_names or [f'joint_{i + 1}' for i in range(test[0].q.shape[1])]
    names = inverse_input_names(joints)
    increment = score_inverse(dict(predicted, prediction=predicted['increment'], variance=None),
                              scored)
    train_target = np.concatenate([arrays[2] for arrays in train_arrays])
    quiet = quiet_targets(train_target, predicted['target'])
    model_scores = score_inverse(predicted, scored)
    varying = [i for i in (range(len(quiet)) if scored is None else scored) if not quiet[i]]
    if quiet.any() and varying:
        model_scores['mean_nmse_varying'] = float(np.mean(np.asarray(model_scores['nmse'])[
            varying]))
    return {'model': model_scores,
            'previous_value': score_inverse(baseline, scored),
            'increment': {k: increment[k] for k in ('mean_nmse', 'mean_change_nmse',
                                                    'change_nmse')},
            'outside_training_range': dict(zip(names, coverage['outside'].tolist())),
            'coverage_warnings': coverage_warnings(coverage, names),
            'quiet_targets': [joint for joint, still in zip(joints, quiet) if still],
            'sees_previous_torque': bool(model.sees_previous_torque),
            'test_samples': int(predicted['target'].shape[0])}


def format_report(report: Dict[str, Any]) -> str:
    """Return a few human lines of an `inverse_report`."""
    model, baseline = report['model'], report['previous_value']
    lines = [f'test samples {report["test_samples"]}: nMSE {model["mean_nmse"]:.4f} (previous '
             f'value {baseline["mean_nmse"]:.4f})']
    if report['sees_previous_torque']:   # fed tau(t-1): only skill on the change counts
        lines.append(f'nMSE of the change tau(t) - tau(t-1): {model["mean_change_nmse"]:.3f} '
                     f'(previous value {baseline["mean_change_nmse"]:.3f}; below it is skill)')
    if 'calibration' in model:
        cal = model['calibration']
        lines.append(f'calibration: {100 * cal["within_1_std"]:.1f} % within 1 std (68.3 '
                     f'calibrated), {100 * cal["within_2_std"]:.1f} % within 2 std (95.4), NLL '
                     f'{cal["nll"]:.3f}')
    if report.get('quiet_targets'):   # reports written before 28 Nov lack the key
        varying = model.get('mean_nmse_varying')
        lines.append(f'WARNING: the torque of {", ".join(report["quiet_targets"])} hardly '
                     'varies in the test data (nMSE there divides by a near-zero variance: '
                     'judge it by RMSE)'
                     + ('' if varying is None else f'; nMSE over the other joints {varying:.4f}'))
    if report['coverage_warnings']:
        lines.append('WARNING: test inputs leave the training ranges (learned models '
                     'extrapolate there):')
        lines += [f'  {line}' for line in report['coverage_warnings']]
    return '\n'.join(lines)
