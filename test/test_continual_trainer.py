"""Continual trainer: learns online in its own thread, guards NaN, publishes weights, budget."""
import time

import numpy as np
import pytest
from robot_dynamics_learning.learning.buffer import BufferConfig
from robot_dynamics_learning.learning.continual import (ContinualLearner, LearnerConfig,
                                                        TrainerConfig)
from robot_dynamics_learning.learning.prequential import (PrequentialError, saved_variance_scale,
                                                          VARIANCE_SCALE_KEY, VarianceCalibration)
from robot_dynamics_learning.models.base import (DynamicsModel, Prediction, SequenceBatch,
                                                 StepOutput)
import torch
from torch import nn


class LinearModel(DynamicsModel):
    """Closed-form test model: target = W observation + b (stateless)."""

    def __init__(self, n_obs: int, n_target: int) -> None:
        super().__init__()
        self.linear = nn.Linear(n_obs, n_target)
        self.register_buffer('scale', torch.ones(n_obs))
        self.fitted_on = []
        self.fitted_spread = []   # std of the observations each fit saw

    def fit_normalization(self, batch):
        self.fitted_on.append(tuple(batch.targets.shape))
        self.fitted_spread.append(float(batch.observations.std()))

    def init_state(self, batch_size):
        return None

    def step(self, state, observation, action=None):
        return StepOutput(self.linear(observation / self.scale), None, None)

    def forward(self, batch):
        return Prediction(self.linear(batch.observations / self.scale), None)

    def loss(self, batch):
        error = self.forward(batch).mean - batch.targets
        loss = (error ** 2).mean()
        return loss, {'mse': float(loss.detach())}


W_TRUE = np.array([[1.0, -2.0, 0.5], [0.3, 0.0, 2.0]])


def stream(learner: ContinualLearner, count: int, start: int = 0, rng=None):
    rng = rng or np.random.default_rng(3)
    for i in range(start, start + count):
        x = rng.normal(size=3)
        learner.observe(i * 1e-3, x, None, W_TRUE @ x)


def make_learner(save=None, **trainer) -> ContinualLearner:
    torch.manual_seed(0)
    config = LearnerConfig(BufferConfig(window=4, recent_capacity=2000, reservoir_windows=50),
                           TrainerConfig(**{'batch_size': 32, 'learning_rate': 0.05,
                                            'warmup_samples': 50, 'updates_per_sample': 0,
                                            'publish_every': 1, 'checkpoint_every_s': 0,
                                            'prequential_window': 200, **trainer}))
    return ContinualLearner(LinearModel(3, 2), 3, 0, 2, config, np.random.default_rng(0),
                            save=save)


def test_learns_online_and_prequential_error_falls():
    learner = make_learner()
    stream(learner, 200)
    before = learner.prequential.nmse()
    learner.start()
    try:
        deadline = time.monotonic() + 20
        while learner.trainer.steps < 150 and time.monotonic() < deadline:
            time.sleep(0.01)
        stream(learner, 200, start=200)
    finally:
        learner.stop()
    assert learner.trainer.steps >= 150
    assert learner.prequential.nmse() < 0.01 < before
    assert learner.predictor.version > 1


def test_prediction_comes_before_training_on_the_same_sample():
    learner = make_learner()
    x = np.array([1.0, 2.0, 3.0])
    model = learner.trainer.published().model
    expected = model.step(None, torch.tensor(x, dtype=torch.float32)[None]).prediction[0]
    mean, variance = learner.observe(0.0, x, None, W_TRUE @ x)
    assert np.allclose(mean, expected.detach().numpy())
    assert variance is None
    assert learner.prequential.count == 1 and learner.buffer.total == 1


def test_non_finite_losses_never_reach_the_weights():
    learner = make_learner()
    stream(learner, 100)
    batch = learner.buffer.sample(8)
    poisoned = SequenceBatch(batch.observations, batch.actions,
                             batch.targets * float('inf'))
    assert not learner.trainer.train_step(poisoned)
    huge = SequenceBatch(batch.observations * 1e38, batch.actions, batch.targets * 1e38)
    learner.trainer.train_step(huge)
    assert learner.trainer.rejected_steps >= 1
    for model in (learner.trainer.model, learner.trainer.published().model):
        assert all(bool(torch.isfinite(v).all()) for v in model.state_dict().values())
    assert learner.trainer.train_step(batch)


def test_budget_bounds_updates_per_sample_and_checkpoints_are_saved():
    saved = []
    learner = make_learner(save=lambda model, meta: saved.append(meta),
                           updates_per_sample=0.1)
    learner.start()
    try:
        stream(learner, 550)
        time.sleep(0.5)
    finally:
        learner.stop()
    assert learner.trainer.steps <= 0.1 * (550 - 50) + 1
    assert learner.trainer.steps >= 1
    # The normalisation is fitted once, on the warm-up samples.
    assert learner.trainer.model.fitted_on == [(1, 50, 2)]
    assert saved and saved[-1]['steps'] == learner.trainer.steps


def test_config_errors_name_the_value():
    with pytest.raises(ValueError, match='batch_size'):
        TrainerConfig(batch_size=0)
    with pytest.raises(ValueError, match='learning_rate'):
        TrainerConfig(learning_rate=-1.0)
    for share in (0.0, 1.5):
        with pytest.raises(ValueError, match='max_cpu_share'):
            TrainerConfig(max_cpu_share=share)


def test_cpu_share_bounds_the_trainer_threads_busy_time():
    busy = {}
    for share in (1.0, 0.2):
        learner = make_learner(max_cpu_share=share)   # updates_per_sample 0: no budget limit
        stream(learner, 300)
        learner.start()
        started = time.perf_counter()
        try:
            time.sleep(1.0)
        finally:
            learner.stop()
        busy[share] = learner.trainer.busy_seconds / (time.perf_counter() - started)
        assert learner.trainer.steps >= 1
    # It pauses 4x each update's duration at share 0.2; without a share it never pauses.
    assert busy[0.2] <= 0.25 < 0.5 < busy[1.0]


def test_prequential_nmse_is_zero_for_perfect_and_one_for_mean_predictions():
    metric = PrequentialError(2, window=100)
    rng = np.random.default_rng(0)
    targets = rng.normal(size=(100, 2))
    for target in targets:
        metric.update(target, target)
    assert metric.nmse() == 0.0
    mean = targets.mean(axis=0)
    for target in targets:      # the same targets again: running variance unchanged
        metric.update(mean, target)
    assert metric.nmse() == pytest.approx(1.0)
    # A joint at rest in the window keeps the long-run variance: no blow-up.
    for _ in range(100):
        metric.update(np.array([0.0, 0.01]), np.array([0.0, 0.0]))
    assert metric.nmse_per_target()[1] < 1e-3


def test_normalisation_is_refitted_once_when_a_robot_at_rest_starts_moving():
    learner = make_learner(updates_per_sample=0.25, renormalize_factor=10.0)
    rng = np.random.default_rng(5)
    for i in range(400):
        scale = 1e-4 if i < 100 else 1.0      # at rest, then moving
        x = scale * rng.normal(size=3)
        learner.observe(i * 1e-3, x, None, W_TRUE @ x)
        learner.trainer.train_pending()
    trainer = learner.trainer
    assert trainer.renormalizations == 1
    assert learner.diagnostics()['renormalizations'] == 1
    # Due on the first moving samples, done once a warm-up's worth of motion (50) is in, on
    # every sample the ring holds: spread about 0.6 (on the first moving samples and the
    # rest before them, or on the rest alone, 0.2 or less).
    at = learner.diagnostics()['renormalized_at_sample']
    assert 150 <= at <= 160
    assert trainer.model.fitted_on == [(1, 50, 2), (1, at, 2)]
    assert trainer.model.fitted_spread[-1] > 0.45


def test_a_channel_that_spreads_wide_now_and_then_is_refitted_at_its_first_wide_stretch():
    """
    Checked before every update, not every 100th: a sparse check can miss wide stretches.

    On the demo's arm joint 7 spread 10-13x wider in 2 s of every 10 s period than in the
    first second; checked every 100th update the refit came 33 s in, just after the payload
    change it then hid (docs/continual.md). Here the wide stretches are 60 samples at 300
    and 1300; an update comes every 4 samples, weights go out every 5th (the default). The
    refit is due in the first stretch and runs a warm-up (50 samples) later.
    """
    learner = make_learner(updates_per_sample=0.25, renormalize_factor=10.0, publish_every=5)
    rng = np.random.default_rng(7)
    for i in range(1600):
        x = rng.normal(size=3) * (30.0 if 300 <= i < 360 or 1300 <= i < 1360 else 1.0)
        learner.observe(i * 1e-3, x, None, W_TRUE @ x)
        learner.trainer.train_pending()
    diagnostics = learner.diagnostics()
    assert diagnostics['renormalizations'] >= 1
    assert 350 <= diagnostics['renormalized_at_sample'] < 400   # after the first


def test_variance_calibration_scales_to_the_prequential_squared_errors():
    """A model that claims variance 1 where its errors have variance 4 publishes 4 soon."""
    rng = np.random.default_rng(0)
    calibration = VarianceCalibration(2, window=500, min_samples=50)
    np.testing.assert_array_equal(calibration.apply(np.ones(2)), np.ones(2))  # not yet scored
    for _ in range(2000):
        calibration.update(rng.normal(0.0, [2.0, 0.5]), np.ones(2))
    np.testing.assert_allclose(calibration.apply(np.ones(2)), [4.0, 0.25], rtol=0.2)
    for _ in range(500):   # the errors shrink: the newest window counts, not the whole past
        calibration.update(rng.normal(0.0, [0.5, 0.5]), np.ones(2))
    np.testing.assert_allclose(calibration.apply(np.ones(2)), [0.25, 0.25], rtol=0.2)


def test_calibration_starts_from_a_saved_prior_and_checkpoints_carry_the_scale():
    """A resumed learner publishes the saved scale until it has scored min_samples itself."""
    prior = np.array([4.0, 0.25])
    calibration = VarianceCalibration(2, window=500, min_samples=50, prior=prior)
    np.testing.assert_array_equal(calibration.apply(np.ones(2)), prior)
    for _ in range(49):
        calibration.update(np.ones(2), np.ones(2))
    np.testing.assert_array_equal(calibration.scale, prior)
    calibration.update(np.ones(2), np.ones(2))
    np.testing.assert_allclose(calibration.scale, [1.0, 1.0])
    calibration.set_prior(prior)   # after min_samples its own measurement wins
    np.testing.assert_allclose(calibration.scale, [1.0, 1.0])
    saved = []
    learner = make_learner(save=lambda model, meta: saved.append(meta), updates_per_sample=0.5)
    learner.calibration.set_prior(prior)
    stream(learner, 60)
    learner.trainer.train_pending()
    learner.trainer.checkpoint_now()
    assert saved[-1][VARIANCE_SCALE_KEY] == prior.tolist()
    assert saved_variance_scale(saved[-1], 2)[0].tolist() == prior.tolist()


@pytest.mark.parametrize('value', [None, [1.0], [1.0, float('nan')], [1.0, -2.0], ['a', 1.0],
                                   [[1.0, 2.0]]])
def test_a_saved_scale_that_cannot_be_right_is_refused_with_a_reason(value):
    scale, why = saved_variance_scale({} if value is None else {VARIANCE_SCALE_KEY: value}, 2)
    assert scale is None and 'variance_scale' in why
