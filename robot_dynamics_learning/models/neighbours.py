"""
A uniform sample of the inputs a model trained on, and the distance to the nearest of them.

Why: a learned model's error grows with the distance from its input to the data it learned
from, inside the training range too. On the Kinova blocks split (LSTM, seed 0, every held
fifth) the errors in units of the model's std grew from a mean square of 0.03-0.5 within 0.25
training std of a training input to 2-13 beyond 2 std; and which blocks are held out moves
that distance (median 1.54 for the tables' held blocks, 0.81 for the test blocks), so a std
sized on the held blocks without it came out too wide on the test blocks (docs/models.md).
`ErrorShape` uses log(distance) as one more input of the log-variance.

The sample is a reservoir over every training batch (`add`): offline it is a uniform sample of
the training windows (refitting on the held-out blocks too adds them), and for a continual
learner it follows what the robot has done so far.
"""
from robot_dynamics_learning.models.defaulted_buffers import DefaultedBuffers
import torch

CAPACITY = 2048      # inputs kept: a streaming step's distance costs 12-35 us on CPU
DISTANCE_FLOOR = 0.1  # normalised units: nearer than a tenth of a training std is "on the data"
_CHUNK = 8192        # query rows per distance matrix (8192 x 2048 floats: 64 MB)
_FEW = 8             # up to this many query rows, differences rather than a matrix product


class TrainingNeighbours(DefaultedBuffers):
    """Up to `CAPACITY` training inputs (normalised, the watched ones), saved with the weights."""

    def __init__(self, n_in: int, capacity: int = CAPACITY) -> None:
        super().__init__()
        self.register_buffer('points', torch.zeros(capacity, n_in))
        self.register_buffer('count', torch.zeros((), dtype=torch.long))   # points held
        self.register_buffer('seen', torch.zeros((), dtype=torch.long))    # inputs offered
        # Its own stream: the reservoir's draws must not move the training's random numbers.
        self._generator = torch.Generator().manual_seed(0)

    @property
    def empty(self) -> bool:
        """Whether no input has been kept (before training, and in older checkpoints)."""
        return int(self.count) == 0

    def reset(self, inputs: torch.Tensor) -> None:
        """Keep an evenly spaced sample of these inputs (..., n_in) only."""
        flat = inputs.detach().reshape(-1, self.points.shape[1]).to(self.points.dtype)
        capacity, n = self.points.shape[0], flat.shape[0]
        if n > capacity:
            flat = flat[torch.linspace(0, n - 1, capacity).long()]
        self.points.zero_()
        self.points[:flat.shape[0]] = flat
        self.count.fill_(flat.shape[0])
        self.seen.fill_(n)

    def add(self, inputs: torch.Tensor) -> None:
        """
        Offer these inputs (..., n_in) to the reservoir (Algorithm R, vectorised).

        Free slots fill first; after that the t-th input offered replaces a random kept one
        with probability capacity / t, so the kept inputs stay a uniform sample of all offered.
        """
        flat = inputs.detach().reshape(-1, self.points.shape[1]).to(self.points.dtype)
        capacity, count, n = self.points.shape[0], int(self.count), flat.shape[0]
        fill = min(capacity - count, n)
        if fill > 0:
            self.points[count:count + fill] = flat[:fill]
            self.count.fill_(count + fill)
        rest = flat[fill:]
        if rest.shape[0]:
            index = int(self.seen) + fill + torch.arange(1, rest.shape[0] + 1, dtype=torch.float64)
            draw = torch.rand(rest.shape[0], generator=self._generator, dtype=torch.float64)
            keep = draw * index < capacity
            slots = torch.randint(capacity, (int(keep.sum()),), generator=self._generator)
            self.points[slots] = rest[keep]
        self.seen.add_(n)

    def distance(self, inputs: torch.Tensor) -> torch.Tensor:
        """Return how far each input (..., n_in) is from the nearest kept one (Euclidean; ...)."""
        if self.empty:
            raise RuntimeError('no training inputs kept yet')
        flat = inputs.reshape(-1, inputs.shape[-1])
        points = self.points[:int(self.count)].to(flat.dtype)
        if flat.shape[0] <= _FEW:   # a streaming step: half the time of `cdist`
            nearest = (points - flat.unsqueeze(1)).pow(2).sum(dim=-1).min(dim=1).values.sqrt()
        else:
            nearest = torch.cat([torch.cdist(part, points).min(dim=1).values
                                 for part in flat.split(_CHUNK)])
        return nearest.reshape(inputs.shape[:-1])

    def log_distance(self, inputs: torch.Tensor) -> torch.Tensor:
        """Return the log of that distance plus `DISTANCE_FLOOR` (...,), for `ErrorShape`."""
        return torch.log(self.distance(inputs) + DISTANCE_FLOOR)
