"""
Race tracks: a closed centre line with a half-width, and differentiable track coordinates.

A track is given by waypoints (closed loop, world frame, m) or by a stadium shape; the centre
line is resampled with a periodic cubic spline at `spacing` m. `project` maps positions to
(progress s along the centre line in m, signed lateral offset in m, left positive) within a
window of segments; the segment choice is discrete, the coordinates within it differentiable.
"""
from dataclasses import dataclass
import math
from pathlib import Path
from typing import Tuple

import numpy as np
from scipy.interpolate import CubicSpline
import torch
import yaml


MAX_TRACK_POINTS = 200_000   # resampled centre-line points (a lap of 10 km at 5 cm)


@dataclass(frozen=True)
class TrackSpec:
    """Centre-line waypoints (N, 2) in m (closed, not repeated), half-width (m), name."""

    waypoints: Tuple[Tuple[float, float], ...]
    half_width: float
    name: str = 'track'
    spacing: float = 0.05

    def __post_init__(self) -> None:
        """Reject tracks that cannot be driven: every number finite and in range."""
        if len(self.waypoints) < 4:
            raise ValueError(f'a track needs at least 4 waypoints, got {len(self.waypoints)}')
        for name in ('half_width', 'spacing'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{name} must be finite and positive, got {value}')
        points = np.asarray(self.waypoints, dtype=np.float64)
        if points.shape != (len(self.waypoints), 2) or not np.isfinite(points).all():
            raise ValueError('waypoints must be finite [x, y] pairs')
        steps = np.linalg.norm(np.diff(np.vstack([points, points[:1]]), axis=0), axis=1)
        if not steps.min() > 0:
            raise ValueError('consecutive waypoints must differ (also the last and the first)')
        if steps.sum() / self.spacing > MAX_TRACK_POINTS:
            raise ValueError(f'a {steps.sum():.4g} m lap at spacing {self.spacing} m needs more '
                             f'than {MAX_TRACK_POINTS} points')


def stadium_waypoints(straight: float, radius: float, count: int = 40
                      ) -> Tuple[Tuple[float, float], ...]:
    """Waypoints of a stadium (two straights of `straight` m, two half circles), CCW."""
    if straight <= 0 or radius <= 0:
        raise ValueError(f'straight and radius must be positive, got {straight}, {radius}')
    points = []
    half = count // 2
    for k in range(half):  # right half circle, from bottom to top
        angle = -np.pi / 2 + np.pi * k / half
        points.append((straight / 2 + radius * np.cos(angle), radius * np.sin(angle)))
    for k in range(half):  # left half circle, from top to bottom
        angle = np.pi / 2 + np.pi * k / half
        points.append((-straight / 2 + radius * np.cos(angle), radius * np.sin(angle)))
    return tuple((float(x), float(y)) for x, y in points)


def load_track_spec(path: Path) -> TrackSpec:
    """
    Read a track YAML.

    Keys: `half_width`, and either `waypoints: [[x, y], ...]` or `stadium: {straight: m,
    radius: m}`; optional `name`, `spacing`.
    Raises ValueError naming the file and the field for anything else.
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f'{path}: not a YAML file ({type(error).__name__})') from None
    if not isinstance(data, dict) or 'half_width' not in data:
        raise ValueError(f'{path}: a track file needs a mapping with half_width')
    try:
        if 'stadium' in data:
            shape = data['stadium']
            if not math.isfinite(float(shape['straight'])) or \
                    not math.isfinite(float(shape['radius'])):
                raise ValueError('stadium straight and radius must be finite')
            waypoints = stadium_waypoints(float(shape['straight']), float(shape['radius']))
        elif 'waypoints' in data:
            waypoints = tuple((float(x), float(y)) for x, y in data['waypoints'])
        else:
            raise ValueError('give either waypoints or stadium')
        return TrackSpec(waypoints, float(data['half_width']),
                         str(data.get('name', Path(path).stem)),
                         float(data.get('spacing', 0.05)))
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        raise ValueError(f'{path}: invalid track ({type(error).__name__}: {error})') from None


class Track:
    """
    A resampled closed centre line: points (M, 2), tangents (M, 2), cumulative s (M,).

    Segment k runs from point k to point k + 1 (mod M); length is the lap length in m.
    """

    def __init__(self, spec: TrackSpec) -> None:
        self.spec = spec
        self.half_width = spec.half_width
        raw = np.asarray(spec.waypoints, dtype=np.float64)
        closed = np.vstack([raw, raw[:1]])
        chord = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(closed, axis=0),
                                                                axis=1))])
        spline = CubicSpline(chord, closed, bc_type='periodic')
        dense = spline(np.linspace(0.0, chord[-1], 4000, endpoint=False))
        dense_s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(
            np.diff(np.vstack([dense, dense[:1]]), axis=0), axis=1))])
        count = max(8, int(round(dense_s[-1] / spec.spacing)))
        targets = np.linspace(0.0, dense_s[-1], count, endpoint=False)
        self.points = np.stack([np.interp(targets, dense_s, np.append(dense[:, i], dense[0, i]))
                                for i in range(2)], axis=1)
        nxt = np.roll(self.points, -1, axis=0)
        seg = nxt - self.points
        self.seg_length = np.linalg.norm(seg, axis=1)
        self.tangents = seg / self.seg_length[:, None]
        self.s = np.concatenate([[0.0], np.cumsum(self.seg_length)[:-1]])
        self.length = float(np.sum(self.seg_length))
        self.curvature = self._curvature()
        self._points_t = torch.as_tensor(self.points, dtype=torch.float32)
        self._tangents_t = torch.as_tensor(self.tangents, dtype=torch.float32)
        self._s_t = torch.as_tensor(self.s, dtype=torch.float32)
        self._len_t = torch.as_tensor(self.seg_length, dtype=torch.float32)

    def _curvature(self) -> np.ndarray:
        """Signed curvature (1/m, left positive) of each segment: its two ends' mean."""
        heading = np.arctan2(self.tangents[:, 1], self.tangents[:, 0])
        turn = (heading - np.roll(heading, 1) + np.pi) % (2 * np.pi) - np.pi
        at_points = turn / (0.5 * (self.seg_length + np.roll(self.seg_length, 1)))
        return 0.5 * (at_points + np.roll(at_points, -1))

    def speed_profile(self, lateral_accel: float, brake_accel: float, top_speed: float,
                      inside: float = 0.0) -> np.ndarray:
        """
        Return the fastest speed (m/s) at each segment start that can still take every turn.

        A turn of curvature kappa holds sqrt(lateral_accel / |kappa|) on a line `inside` m
        inside the centre line (radius 1 / |kappa| - inside, at least 5 cm), at most
        top_speed; before it the car must brake down at brake_accel (m/s^2), so
        v_k^2 = min over the segments j ahead of (corner_j^2 + 2 brake_accel (s_j - s_k)):
        a reverse running minimum over two laps (the lap is closed), no loop.
        """
        if not (lateral_accel > 0 and brake_accel > 0 and top_speed > 0 and inside >= 0):
            raise ValueError(f'speed_profile needs positive accelerations and top speed, '
                             f'got {lateral_accel}, {brake_accel}, {top_speed}, {inside}')
        radius = np.maximum(1.0 / np.maximum(np.abs(self.curvature), 1e-9) - inside, 0.05)
        corner = np.minimum(np.sqrt(lateral_accel * radius), top_speed)
        s = np.concatenate([self.s, self.s + self.length])
        reach = np.concatenate([corner, corner]) ** 2 + 2.0 * brake_accel * s
        ahead = np.minimum.accumulate(reach[::-1])[::-1]
        return np.sqrt(np.maximum(ahead[:self.size] - 2.0 * brake_accel * self.s, 0.0))

    def advance(self, s_from: float, s_to: float) -> float:
        """Return the distance (m) from s_from to s_to along the track, the nearer way round."""
        return (s_to - s_from + self.length / 2) % self.length - self.length / 2

    @property
    def size(self) -> int:
        """Return the number of centre-line segments."""
        return int(self.points.shape[0])

    def nearest_segment(self, xy: np.ndarray) -> int:
        """Index of the segment closest to one (2,) position (full search, numpy)."""
        rel = np.asarray(xy, dtype=np.float64)[None] - self.points
        t = np.clip(np.sum(rel * self.tangents, axis=1), 0.0, self.seg_length)
        foot = self.points + t[:, None] * self.tangents
        return int(np.argmin(np.sum((np.asarray(xy)[None] - foot) ** 2, axis=1)))

    def window_tensors(self, first: int, count: int) -> Tuple[torch.Tensor, ...]:
        """
        Geometry of `count` consecutive segments from `first` (wrapping), for `project`.

        Returns (points (W, 2), tangents (W, 2), lengths (W,), offsets (W,)): offsets are the
        progress at each segment start measured from the first one.
        """
        index = (torch.arange(count) + int(first)) % self.size
        length = self._len_t[index]
        return (self._points_t[index], self._tangents_t[index], length,
                torch.cumsum(length, 0) - length)

    @staticmethod
    def project(xy: torch.Tensor, window: Tuple[torch.Tensor, ...]
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Track coordinates of (..., 2) positions within a segment window (`window_tensors`).

        Returns (s, lateral), each (...,): s is the progress in m from the window's start,
        lateral the signed offset from the centre line (left of the driving direction
        positive). The nearest centre-line point picks the segment (it or the one before);
        coordinates are exact and differentiable within it.
        """
        points, tangents, lengths, offsets = window
        with torch.no_grad():  # the segment choice is discrete: no gradient through it
            # |xy - p|^2 up to the per-position constant |xy|^2, as one matrix product
            # (the (..., W, 2) difference tensor of a direct search costs 5-10x more).
            # Coordinates relative to the window's first point keep the float32 precision.
            origin = points[0]
            flat = xy.detach().reshape(-1, 2) - origin
            local = points - origin
            distance = torch.addmm((local * local).sum(-1), flat, local.t(), alpha=-2.0)
            # numpy's argmin (same first-minimum rule) runs 2-3x faster on these short rows
            nearest = torch.from_numpy(distance.numpy().argmin(-1)).view(xy.shape[:-1])
            ahead = ((xy.detach() - points[nearest]) * tangents[nearest]).sum(-1)
        k = torch.where((ahead < 0) & (nearest > 0), nearest - 1, nearest)
        point, tangent = points[k], tangents[k]
        d = xy - point
        along = (d * tangent).sum(-1)
        t = torch.minimum(torch.clamp(along, min=0.0), lengths[k])
        lateral = d[..., 1] * tangent[..., 0] - d[..., 0] * tangent[..., 1]
        return offsets[k] + t, lateral

    def pose_at(self, s: float) -> Tuple[float, float, float]:
        """Centre-line (x, y, heading) at progress s (m, modulo the lap length)."""
        s = float(s) % self.length
        k = int(np.searchsorted(self.s, s, side='right') - 1)
        point = self.points[k] + (s - self.s[k]) * self.tangents[k]
        return float(point[0]), float(point[1]), float(np.arctan2(self.tangents[k, 1],
                                                                  self.tangents[k, 0]))

    def coordinates(self, xy: np.ndarray) -> Tuple[float, float]:
        """(lap progress s in [0, length), lateral offset) of one (2,) position, numpy."""
        k = self.nearest_segment(xy)
        rel = np.asarray(xy, dtype=np.float64) - self.points[k]
        along = float(np.clip(rel @ self.tangents[k], 0.0, self.seg_length[k]))
        lateral = float(rel[1] * self.tangents[k, 0] - rel[0] * self.tangents[k, 1])
        return (self.s[k] + along) % self.length, lateral


class LapCounter:
    """
    Distance driven along a track, the time each lap ended and each lap's largest |lateral|.

    Progress is summed step by step (wrapped to the nearest way round), so a car that drives
    backwards loses it and a lap counts only once the whole length is covered.
    """

    def __init__(self, track: Track, xy: np.ndarray) -> None:
        self.track = track
        self.travelled = 0.0
        self._last_s = track.coordinates(xy)[0]
        self.ends = [0.0]           # time (s) of the start and of every completed lap
        self.max_lateral = [0.0]    # per lap, the running one last (m)

    @property
    def laps(self) -> float:
        """Return the laps driven (fractional)."""
        return self.travelled / self.track.length

    def update(self, time_s: float, xy: np.ndarray) -> float:
        """Account for the car at xy (2,) at time_s; return its lateral offset (m)."""
        s, lateral = self.track.coordinates(xy)
        self.travelled += self.track.advance(self._last_s, s)
        self._last_s = s
        self.max_lateral[-1] = max(self.max_lateral[-1], abs(lateral))
        if self.travelled >= len(self.ends) * self.track.length:
            self.ends.append(time_s)
            self.max_lateral.append(0.0)
        return lateral

    def lap_times(self) -> list:
        """Return the duration (s) of every completed lap."""
        return np.diff(self.ends).tolist()

    def lap_max_lateral(self) -> list:
        """Return the largest |lateral| (m) of every completed lap."""
        return self.max_lateral[:len(self.ends) - 1]
