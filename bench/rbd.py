"""
Rigid-body dynamics: our batched torch implementation vs differentiable-robot-model vs Pinocchio.

RNEA, ABA, CRBA, forward kinematics and the end-effector Jacobian of the 7-DoF Panda at
batch 1 and 1000, float32 and float64, all three libraries in the same run on the same URDF,
one CPU thread (torch.set_num_threads(1); Pinocchio single-threaded). Writes
bench/results/rbd.json; docs/dynamics.md holds the table.

differentiable-robot-model (DRM) 0.2.3 gives a link without <inertial> mass 1 kg, so it gets
the same arm without the massless flange link (identical parameters; end effector = link 7).
DRM is float32-only: its float64 rows are absent. Pinocchio is float64-only (C++); its batch
numbers use the faster of `rneaInParallel`/`abaInParallel` (one thread) and a Python loop
over pin.rnea/pin.aba; a Python loop for the rest. Each number is the minimum over repeats
of the mean time per call (the least noisy estimate on a shared machine, for all three).
"""
import json
from pathlib import Path
import platform
import time
from typing import Callable, Dict, Optional
import warnings

import numpy as np
from robot_dynamics_learning.dynamics import (aba, crba, forward_kinematics, jacobian,
                                              load_urdf, rnea)
from robot_dynamics_learning.memory import retain_freed_memory
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'bench' / 'results' / 'rbd.json'
EE = 'panda_link7'
OPS = ('rnea', 'aba', 'crba', 'fk', 'jacobian')


def _drm_urdf(tmp: Path) -> Path:
    """Return the Panda URDF without the massless flange link (DRM would give it 1 kg)."""
    text = (ROOT / 'urdf' / 'panda.urdf').read_text()
    start = text.index('  <!-- Flange frame')
    stop = text.index('</robot>')
    path = tmp / 'panda_no_flange.urdf'
    path.write_text(text[:start] + text[stop:])
    return path


def _time_together(fns: Dict[str, Callable[[], object]], budget_s: float = 0.3,
                   rounds: int = 7) -> Dict[str, float]:
    """
    Return the minimum over rounds of the mean seconds per call of each function.

    The functions take turns within every round, so on a shared, loaded machine all of them
    see the same load; the minimum is the least noisy estimate.
    """
    calls = {}
    for name, fn in fns.items():
        fn()
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        calls[name] = max(1, int(budget_s / rounds / once))
    best = dict.fromkeys(fns, float('inf'))
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / calls[name])
    return best


def _ours(model, q, qd, qdd) -> Dict[str, Callable[[], object]]:
    return {
        'rnea': lambda: rnea(model, q, qd, qdd),
        'aba': lambda: aba(model, q, qd, qdd),
        'crba': lambda: crba(model, q),
        'fk': lambda: forward_kinematics(model, q),
        'jacobian': lambda: jacobian(model, q, EE),
    }


def _drm(robot, q, qd, qdd) -> Dict[str, Callable[[], object]]:
    return {
        'rnea': lambda: robot.compute_inverse_dynamics(q, qd, qdd, include_gravity=True),
        'aba': lambda: robot.compute_forward_dynamics(q, qd, qdd, include_gravity=True),
        'crba': lambda: robot.compute_lagrangian_inertia_matrix(q),
        'fk': lambda: robot.compute_forward_kinematics(q, EE),
        'jacobian': lambda: robot.compute_endeffector_jacobian(q, EE),
    }


def _pinocchio(pin, model, q, qd, qdd) -> Dict[str, Callable[[], object]]:
    """Batch-major numpy arrays (B, n); q.T etc. for the parallel API."""
    data = model.createData()
    frame = model.getFrameId(EE)
    batch = q.shape[0]
    if batch == 1:
        qs, vs, acs = q[0], qd[0], qdd[0]
        return {
            'rnea': lambda: pin.rnea(model, data, qs, vs, acs),
            'aba': lambda: pin.aba(model, data, qs, vs, acs),
            'crba': lambda: pin.crba(model, data, qs),
            'fk': lambda: pin.framesForwardKinematics(model, data, qs),
            'jacobian': lambda: pin.computeFrameJacobian(model, data, qs, frame,
                                                         pin.LOCAL_WORLD_ALIGNED),
        }
    pool = pin.ModelPool(model, 1)
    qt, vt, at = (np.ascontiguousarray(x.T) for x in (q, qd, qdd))
    out = np.zeros_like(vt)

    def loop(call):
        def run():
            for b in range(batch):
                call(q[b], qd[b], qdd[b])
        return run

    return {
        'rnea': lambda: pin.rneaInParallel(1, pool, qt, vt, at, out),
        'rnea_loop': loop(lambda a, b, c: pin.rnea(model, data, a, b, c)),
        'aba': lambda: pin.abaInParallel(1, pool, qt, vt, at, out),
        'aba_loop': loop(lambda a, b, c: pin.aba(model, data, a, b, c)),
        'crba': loop(lambda a, b, c: pin.crba(model, data, a)),
        'fk': loop(lambda a, b, c: pin.framesForwardKinematics(model, data, a)),
        'jacobian': loop(lambda a, b, c: pin.computeFrameJacobian(
            model, data, a, frame, pin.LOCAL_WORLD_ALIGNED)),
    }


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a / b


def main() -> None:
    """Run the benchmark and write bench/results/rbd.json."""
    import tempfile

    import pinocchio as pin
    from differentiable_robot_model.robot_model import DifferentiableRobotModel

    torch.set_num_threads(1)
    retain_freed_memory()  # for all three libraries alike
    with tempfile.TemporaryDirectory() as tmp:
        urdf = _drm_urdf(Path(tmp))
        ours = load_urdf(urdf)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            drm = DifferentiableRobotModel(str(urdf), 'panda', device='cpu')
        pin_model = pin.buildModelFromUrdf(str(urdf))
    rows = []
    check = {}
    gen = torch.Generator().manual_seed(0)
    for batch in (1, 1000):
        base = [torch.randn(batch, 7, generator=gen, dtype=torch.float64) for _ in range(3)]
        pin_calls = _pinocchio(pin, pin_model, *(x.numpy() for x in base))
        for dtype in (torch.float32, torch.float64):
            q, qd, qdd = (x.to(dtype) for x in base)
            ours_calls = _ours(ours, q, qd, qdd)
            drm_calls = _drm(drm, q, qd, qdd) if dtype == torch.float32 else {}
            ours_times: Dict[str, float] = {}
            drm_times: Dict[str, Optional[float]] = dict.fromkeys(OPS)
            pin_times: Dict[str, float] = {}
            with torch.no_grad():
                for op in OPS:  # the three libraries take turns on each operation
                    fns = {'ours': ours_calls[op], 'pin': pin_calls[op]}
                    if f'{op}_loop' in pin_calls:
                        fns['pin_loop'] = pin_calls[f'{op}_loop']
                    if drm_calls:
                        fns['drm'] = drm_calls[op]
                    times = _time_together(fns)
                    ours_times[op] = times['ours']
                    # Pinocchio: the faster of its parallel API and a Python loop.
                    pin_times[op] = min(times['pin'], times.get('pin_loop', times['pin']))
                    if drm_calls:
                        drm_times[op] = times['drm']
                if drm_calls:
                    check[f'batch{batch}'] = float(
                        (drm_calls['rnea']().double() - rnea(ours, *base)).abs().max())
            for op in OPS:
                rows.append({
                    'op': op, 'batch': batch, 'dtype': str(dtype).replace('torch.', ''),
                    'ours_ms': ours_times[op] * 1e3,
                    'drm_ms': None if drm_times[op] is None else drm_times[op] * 1e3,
                    'pinocchio_ms': pin_times[op] * 1e3,
                    'speedup_vs_drm': _ratio(drm_times[op], ours_times[op]),
                    'ours_over_pinocchio': _ratio(ours_times[op], pin_times[op]),
                })
                row = rows[-1]
                drm_ms = float('nan') if row['drm_ms'] is None else row['drm_ms']
                print(f"{op:8s} B={batch:4d} {row['dtype']:7s} ours {row['ours_ms']:8.3f} ms"
                      f"  drm {drm_ms:8.3f} ms  pinocchio {row['pinocchio_ms']:8.4f} ms",
                      flush=True)
    result = {
        'benchmark': 'rbd',
        'robot': 'panda (7 DoF, urdf/panda.urdf without the massless flange)',
        'threads': 1,
        'torch': torch.__version__,
        'pinocchio': pin.__version__,
        'machine': platform.processor() or platform.machine(),
        'drm_rnea_max_abs_diff_float32_vs_ours_float64': check,
        'rows': rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(f'wrote {RESULTS}')


if __name__ == '__main__':
    main()
