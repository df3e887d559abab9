"""Shared check of the bag-replay tests: the ROS route scores as `rdl replay` does."""
import numpy as np


def assert_same_scores(live: dict, offline: dict) -> None:
    """Prequential scores of a live learner and `rdl replay` agree to float noise."""
    assert np.isfinite(live['prequential']['nmse']) and offline['train_steps'] > 0, offline
    np.testing.assert_allclose(live['prequential']['nmse'], offline['prequential']['nmse'],
                               rtol=1e-3)
    np.testing.assert_allclose(live['prequential']['rmse_per_joint'],
                               offline['prequential']['rmse_per_joint'], rtol=1e-3)
