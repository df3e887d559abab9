"""Streaming buffer: bounded memory, windows never cross gaps, reservoir keeps old regimes."""
import threading

import numpy as np
import pytest

from robot_dynamics_learning.learning.buffer import BufferConfig, StreamingBuffer


def make_buffer(**overrides) -> StreamingBuffer:
    config = BufferConfig(**{'window': 4, 'recent_capacity': 50, 'reservoir_windows': 10,
                             'reservoir_stride': 2, **overrides})
    return StreamingBuffer(2, 1, 1, config, np.random.default_rng(0))


def fill(buffer: StreamingBuffer, times, start_value: float = 0.0) -> None:
    for i, t in enumerate(times):
        value = start_value + i
        buffer.append(t, np.array([value, t]), np.array([value]), np.array([value]))


def test_windows_are_consecutive_samples_of_one_segment():
    buffer = make_buffer(reservoir_windows=0)
    times = list(np.arange(20) * 1e-3) + list(0.1 + np.arange(20) * 1e-3)  # a 80 ms gap
    fill(buffer, times)
    assert buffer.breaks == 1
    batch = buffer.sample(500)
    values = batch.observations[..., 0].numpy()
    assert np.all(np.diff(values, axis=1) == 1.0)
    # No window contains both sample 19 (before the gap) and sample 20 (after it).
    assert not np.any((values[:, :-1] == 19) & (values[:, 1:] == 20))
    assert batch.observations.shape == (500, 4, 2)
    assert batch.actions.shape == (500, 4, 1)


@pytest.mark.parametrize('second_dt', [0.0, -0.5, 0.010])
def test_backwards_time_and_gaps_start_segments(second_dt):
    buffer = make_buffer()
    fill(buffer, [0.0, 0.001, 0.002, 0.003])
    last = 0.003
    buffer.append(last + second_dt, np.zeros(2), np.zeros(1), np.zeros(1))
    assert buffer.breaks == 1


def test_jitter_within_gap_factor_keeps_one_segment():
    rng = np.random.default_rng(1)
    buffer = make_buffer()
    times = np.cumsum(1e-3 * (1 + 0.4 * rng.uniform(-1, 1, 200)))
    fill(buffer, times)
    assert buffer.breaks == 0


def test_ring_is_bounded_and_keeps_the_newest_samples():
    buffer = make_buffer(reservoir_windows=0)
    fill(buffer, np.arange(500) * 1e-3)
    batch = buffer.sample(300)
    values = batch.observations[..., 0].numpy()
    assert values.min() >= 450   # capacity 50: only the newest 50 samples remain
    assert buffer.total == 500


def test_reservoir_keeps_the_old_regime_after_the_ring_moved_on():
    buffer = make_buffer(recent_fraction=0.5)
    fill(buffer, np.arange(400) * 1e-3)                       # regime A: values 0..399
    fill(buffer, 0.4 + np.arange(400) * 1e-3, start_value=1e4)  # regime B
    batch = buffer.sample(400)
    values = batch.observations[..., 0].numpy()
    from_a = np.all(values < 1e4, axis=1)
    assert 0 < from_a.sum() < 400   # both regimes appear in one batch
    assert buffer.reservoir_size == 10


def test_empty_buffer_and_short_segments_give_no_batch():
    buffer = make_buffer(reservoir_windows=0)
    assert buffer.sample(8) is None
    fill(buffer, [0.0, 0.001, 0.002])     # shorter than one window
    assert buffer.sample(8) is None
    assert buffer.valid_windows() == 0


def test_non_finite_values_are_refused_with_the_field_name():
    buffer = make_buffer()
    with pytest.raises(ValueError, match='target'):
        buffer.append(0.0, np.zeros(2), np.zeros(1), np.array([np.nan]))
    assert buffer.total == 0


def test_reset_breaks_windows_and_bad_configs_are_named():
    buffer = make_buffer(reservoir_windows=0)
    fill(buffer, np.arange(6) * 1e-3)
    buffer.reset()
    fill(buffer, 0.006 + np.arange(6) * 1e-3, start_value=6)
    values = buffer.sample(200).observations[..., 0].numpy()
    assert not np.any((values[:, :-1] == 5) & (values[:, 1:] == 6))
    with pytest.raises(ValueError, match='recent_capacity'):
        BufferConfig(window=10, recent_capacity=5)
    with pytest.raises(ValueError, match='gap_factor'):
        BufferConfig(gap_factor=1.0)


def test_concurrent_append_and_sample_stay_consistent():
    buffer = make_buffer(recent_capacity=200)
    errors = []

    def writer():
        fill(buffer, np.arange(5000) * 1e-3)

    def reader():
        for _ in range(200):
            batch = buffer.sample(16)
            if batch is not None:
                values = batch.observations[..., 0].numpy()
                recent = values[values[:, 0] >= 0]
                if not np.all(np.diff(recent, axis=1) == 1.0):
                    errors.append(values)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


def test_steady_message_drops_and_rate_changes_stop_breaking_windows():
    rng = np.random.default_rng(2)
    buffer = make_buffer(reservoir_windows=0, recent_capacity=2000)
    # 1 kHz with 80 % of messages lost at random, then a lasting change to 5 ms.
    kept = np.nonzero(rng.uniform(size=5000) < 0.2)[0] * 1e-3
    fill(buffer, list(kept) + list(kept[-1] + 5e-3 * np.arange(1, 301)))
    assert buffer.breaks < 0.1 * len(kept)
    assert buffer.valid_windows() > 100
