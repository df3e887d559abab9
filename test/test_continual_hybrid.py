"""The hybrid's online physics: fast regressor, payload RLS with change detection, the split."""
import copy

import numpy as np
import pytest
from robot_dynamics_learning.dynamics import load_urdf
from robot_dynamics_learning.dynamics.algorithms import inertial_regressor
from robot_dynamics_learning.learning.buffer import BufferConfig
from robot_dynamics_learning.learning.continual import (ContinualLearner, LearnerConfig,
                                                        TrainerConfig)
from robot_dynamics_learning.models.hybrid import (FastRegressor, PayloadConfig,
                                                   PayloadEstimator)
from robot_dynamics_learning.models.registry import build_model
from robot_dynamics_learning.resources import resource
import torch

PANDA = resource('urdf/panda.urdf')


def _samples(rng: np.random.Generator, count: int, n: int = 7) -> np.ndarray:
    return np.concatenate([rng.uniform(-1.5, 1.5, (count, n)), rng.normal(0, 1, (count, n)),
                           rng.normal(0, 3, (count, n))], axis=1)


def test_fast_regressor_matches_the_package_regressor():
    pytest.importorskip('pinocchio')
    robot = load_urdf(PANDA)
    fast = FastRegressor(robot, PANDA)
    assert fast.backend == 'pinocchio'
    x = _samples(np.random.default_rng(0), 3)
    for row in x:
        q, qd, qdd = row[:7], row[7:14], row[14:]
        ours = inertial_regressor(robot, *(torch.from_numpy(v) for v in (q, qd, qdd))).numpy()
        np.testing.assert_allclose(fast(q, qd, qdd), ours, atol=1e-9)
    assert copy.deepcopy(fast) is fast


def _payload_step(estimator: PayloadEstimator, x: np.ndarray, truth: np.ndarray, noise: float,
                  rng: np.random.Generator) -> float:
    """Predict, then update on the torque of payload `truth` plus noise; return the max error."""
    fast = estimator.regressor
    target = fast(x[:7], x[7:14], x[14:]) @ (fast.phi + np.pad(truth, (60, 0)))
    error = np.abs(estimator.predict(x) - target).max()
    estimator.update(target + rng.normal(0, noise, 7))
    return float(error)


def test_payload_is_identified_and_a_change_is_tracked_within_a_few_hundred_samples():
    robot = load_urdf(PANDA)
    fast = FastRegressor(robot, PANDA)
    estimator = PayloadEstimator(fast, PayloadConfig(start_after=500))
    rng = np.random.default_rng(1)
    # A 2 kg payload 0.15 m along the flange axis: m, m c, inertia about the body origin.
    payload = np.zeros(10)
    payload[0], payload[3] = 2.0, 0.3
    payload[4] = payload[7] = 2.0 * 0.15 ** 2
    errors = []
    for k, x in enumerate(_samples(rng, 3000)):
        errors.append(_payload_step(estimator, x, payload if k < 2000 else np.zeros(10), 0.01,
                                    rng))
        if k == 1999:
            assert estimator.state()[0] == pytest.approx(2.0, abs=0.05)
    assert estimator.resets >= 1     # the removal was detected
    assert estimator.state()[0] == pytest.approx(0.0, abs=0.05)
    assert max(errors[2300:]) < 0.1 * max(errors[1990:2010])


@pytest.mark.parametrize('burst', [3, 15, 60])   # samples; the test's windows are 8 and 40
def test_bursts_of_error_leave_the_estimate_but_a_new_payload_restarts_it(burst):
    # A trajectory gives bursts of tens of samples of large error at some phases (the residual
    # network's misses); a restart there throws the estimate around. Bursts shorter than half
    # the short window do not restart it; longer ones do, and the trial that follows undoes
    # the restart. A payload change raises every error: that restarts it, once, for good.
    estimator = PayloadEstimator(FastRegressor(load_urdf(PANDA), PANDA),
                                 PayloadConfig(start_after=0))
    rng = np.random.default_rng(4)
    payload = np.zeros(10)
    payload[0], payload[3] = 1.0, 0.1
    for k, x in enumerate(_samples(rng, 6500)):
        noise = 0.5 if 2000 <= k < 6000 and k % 1000 < burst else 0.01
        _payload_step(estimator, x, payload if k < 6000 else 2.0 * payload, noise, rng)
        if k == 5999:
            assert estimator.resets == 0
            assert ((estimator.false_alarms > 0)
                    == (burst >= PayloadConfig().fast_change_window // 2))
            assert estimator.state()[0] == pytest.approx(1.0, abs=0.05)
    assert estimator.resets == 1
    assert estimator.state()[0] == pytest.approx(2.0, abs=0.05)


def _two_kg(config: PayloadConfig, seed: int) -> tuple:
    """Return an estimator on the Panda, a generator and a 2 kg payload 0.15 m out."""
    payload = np.zeros(10)
    payload[0], payload[3] = 2.0, 0.3
    return (PayloadEstimator(FastRegressor(load_urdf(PANDA), PANDA), config),
            np.random.default_rng(seed), payload)


@pytest.mark.parametrize('fast_ratio', [0.0, 60.0])
def test_a_large_change_restarts_within_the_short_window(fast_ratio):
    # Every sample before the restart is predicted with the old payload: the long median
    # alone needs half its window of changed samples, the short one half of its own.
    config = PayloadConfig(start_after=0, fast_change_ratio=fast_ratio)
    estimator, rng, payload = _two_kg(config, 5)
    restarted_at = None
    for k, x in enumerate(_samples(rng, 3000)):
        _payload_step(estimator, x, payload if k >= 2000 else np.zeros(10), 0.01, rng)
        if restarted_at is None and estimator.resets:
            restarted_at = k
    assert restarted_at is not None and restarted_at >= 2000
    delay = restarted_at - 2000 + 1
    if fast_ratio:
        assert delay <= config.fast_change_window
    else:
        assert delay >= config.change_window // 2
    assert estimator.state()[0] == pytest.approx(2.0, abs=0.05)


@pytest.mark.parametrize('recall', [0, 4])
def test_a_payload_put_back_is_recalled_not_re_identified(recall):
    # 0 kg, then 2 kg, then 0 kg again: the first estimate, kept when the 2 kg restart was
    # confirmed, fits the samples after the return and is taken back whole.
    estimator, rng, payload = _two_kg(PayloadConfig(start_after=0, recall=recall), 6)
    errors = []
    for k, x in enumerate(_samples(rng, 4500)):
        errors.append(_payload_step(estimator, x, payload if 2000 <= k < 4000 else np.zeros(10),
                                    0.01, rng))
        if k == 4019:
            mass_after_return = estimator.state()[0]
    assert estimator.resets == 2 and estimator.recalls == (1 if recall else 0)
    assert estimator.state()[0] == pytest.approx(0.0, abs=0.05)
    settled = np.mean(errors[1500:2000])
    after_return = np.mean(errors[4010:4050])
    if recall:
        assert mass_after_return == pytest.approx(0.0, abs=0.01)
        assert after_return < 1.5 * settled
    else:
        assert after_return > 1.5 * settled
    with pytest.raises(ValueError, match='recall'):
        PayloadConfig(recall=-1)
    with pytest.raises(ValueError, match='recall_ratio'):
        PayloadConfig(recall_ratio=-1.0)


def test_split_learner_stores_residuals_and_checkpoints_the_payload():
    config = {'urdf': str(PANDA), 'hidden_size': 8, 'payload_start_after': 0}
    torch.manual_seed(0)
    model = build_model('hybrid', config, 21, 7, 7)
    saved = []
    learner = ContinualLearner(model, 21, 7, 7,
                               LearnerConfig(BufferConfig(window=8, recent_capacity=500,
                                                          reservoir_windows=10),
                                             TrainerConfig(batch_size=4, warmup_samples=50,
                                                           updates_per_sample=0.05)),
                               np.random.default_rng(0),
                               save=lambda snapshot, meta: saved.append(snapshot))
    fast = model.regressor
    rng = np.random.default_rng(2)
    extra = np.zeros(70)
    extra[60], extra[63] = 1.0, 0.1      # 1 kg payload
    for k, x in enumerate(_samples(rng, 600)):
        y = fast(x[:7], x[7:14], x[14:])
        target = y @ (fast.phi + extra) + 0.5 * np.tanh(x[7:14])    # + viscous-like friction
        mean, _ = learner.observe(k * 1e-3, x, np.zeros(7), target)
        learner.trainer.train_pending()
    assert learner.trainer.steps > 0
    assert learner.diagnostics()['payload_mass_change_kg'] == pytest.approx(1.0, abs=0.3)
    # Stored targets are the residuals tau - physics (physics with the estimate of the time).
    batch = learner.buffer.recent(10)
    x = batch.observations[0].double().numpy()
    stored = batch.targets[0].double().numpy()
    friction = 0.5 * np.tanh(x[:, 7:14])
    payload = np.stack([fast(r[:7], r[7:14], r[14:])[:, 60:] @ extra[60:] for r in x])
    assert np.abs(stored - friction).mean() < 0.2 * np.abs(payload).mean()
    learner.trainer._checkpoint()
    snapshot = saved[-1]
    assert float(snapshot.payload[0]) == pytest.approx(learner.physics.state()[0])
    # Reloaded (not split) the model adds its own physics: the same torque as the split pair.
    fresh = build_model('hybrid', config, 21, 7, 7)
    fresh.load_state_dict(snapshot.state_dict())
    obs = torch.from_numpy(x[:1]).float()
    whole = fresh.step(None, obs).prediction
    phys = torch.from_numpy(learner.physics.predict(x[0])).float()[None]
    split = snapshot.step(None, obs).prediction + phys
    torch.testing.assert_close(whole, split, atol=1e-3, rtol=1e-4)


def test_non_finite_targets_leave_the_payload_estimate_alone():
    robot = load_urdf(PANDA)
    estimator = PayloadEstimator(FastRegressor(robot, PANDA), PayloadConfig(start_after=0))
    x = _samples(np.random.default_rng(3), 1)[0]
    estimator.predict(x)
    estimator.update(np.full(7, np.nan))
    assert estimator.updates == 0 and np.all(estimator.state() == 0.0)
    with pytest.raises(ValueError, match='change_ratio'):
        PayloadConfig(change_ratio=-1.0)
    with pytest.raises(ValueError, match='change_window'):
        PayloadConfig(change_window=0)
    with pytest.raises(ValueError, match='fast_change_ratio'):
        PayloadConfig(fast_change_ratio=-1.0)
    with pytest.raises(ValueError, match='fast_change_window'):
        PayloadConfig(fast_change_window=41)
