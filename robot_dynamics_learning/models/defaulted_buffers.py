"""Modules whose buffers older checkpoints may lack."""
from torch import nn


class DefaultedBuffers(nn.Module):
    """
    A module added to models after checkpoints of them existed: its buffers may be missing.

    Loading such a checkpoint keeps this module's neutral defaults (and the checkpoint's shape
    check accepts their absence), so older files stay usable.
    """

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Fill the buffers a checkpoint lacks with the current (neutral) values."""
        for name, value in self._buffers.items():
            state_dict.setdefault(prefix + name, value)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
