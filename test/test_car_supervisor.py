"""The car MPC's safety logic on an injected clock: every transition, no DDS, no sleeping."""
import numpy as np
import pytest
from robot_dynamics_learning.control.car_supervisor import (BRAKE, CarSupervisor, PUBLISH,
                                                            SKIP, SOLVE)

MS = 1_000_000
POSE, TWIST = (1.0, 2.0, 0.3), (1.5, 0.0, 0.1)


class Clock:
    """A node clock the test moves by hand (ns)."""

    def __init__(self, now_ns: int = 10_000 * MS) -> None:
        self.now = now_ns

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def supervisor(clock):
    return CarSupervisor(0.1, clock)


def _state(supervisor: CarSupervisor, stamp_ns: int) -> None:
    assert supervisor.offer('pose', stamp_ns, POSE) is None
    assert supervisor.offer('twist', stamp_ns, TWIST) is None


def test_no_state_is_stale_and_brakes(supervisor):
    assert supervisor.stale() and supervisor.watchdog()
    assert supervisor.before_solve() == (BRAKE, 'stale', -1, None)


def test_a_complete_fresh_state_is_solved_and_its_command_published(supervisor, clock):
    _state(supervisor, clock.now - 20 * MS)
    decision = supervisor.before_solve()
    assert decision.action == SOLVE and decision.stamp_ns == clock.now - 20 * MS
    assert np.array_equal(decision.state, [*POSE, *TWIST])
    assert supervisor.after_solve(decision.stamp_ns, True, 'ok').action == PUBLISH
    assert supervisor.counts['commands'] == 1 and not supervisor.watchdog()


def test_pose_and_twist_of_different_stamps_are_not_a_state(supervisor, clock):
    supervisor.offer('pose', clock.now, POSE)
    supervisor.offer('twist', clock.now - MS, TWIST)
    assert supervisor.stale()


def test_stale_by_stamp_even_when_delivered_late(supervisor, clock):
    _state(supervisor, clock.now - 150 * MS)   # arrives now, but stamped 150 ms ago
    assert supervisor.stale() and supervisor.before_solve().action == BRAKE


def test_state_goes_stale_as_the_clock_moves_and_the_watchdog_brakes_once(supervisor, clock):
    _state(supervisor, clock.now)
    assert not supervisor.watchdog()
    clock.now += 101 * MS
    assert supervisor.watchdog()
    assert supervisor.brake('stale')        # starts a braking spell
    assert not supervisor.watchdog()        # already braking: no brake every 10 ms
    assert not supervisor.brake('stale')    # a tick's brake continues the spell
    assert supervisor.counts['brake_stale'] == 2


def test_future_stamped_out_of_order_and_non_finite_inputs_are_dropped(supervisor, clock):
    assert supervisor.offer('pose', clock.now + 200 * MS, POSE) == 'future_stamp'
    assert supervisor.offer('pose', clock.now + 50 * MS, POSE) is None   # within the bound
    assert supervisor.offer('pose', clock.now, POSE) == 'out_of_order'
    assert supervisor.offer('pose', clock.now + 50 * MS, POSE) == 'out_of_order'  # repeat
    assert supervisor.offer('twist', clock.now + 60 * MS, (np.nan, 0.0, 0.0)) == 'non_finite'
    assert {k: supervisor.counts[f'rejected_{k}'] for k in
            ('future_stamp', 'out_of_order', 'non_finite')} == {
        'future_stamp': 1, 'out_of_order': 2, 'non_finite': 1}
    assert supervisor.stale()   # none of them made a complete state


def test_one_far_future_stamp_does_not_blind_the_gate(supervisor, clock):
    supervisor.offer('pose', clock.now + 3600 * 10**9, POSE)   # refused: not remembered
    _state(supervisor, clock.now)
    assert supervisor.before_solve().action == SOLVE


def test_after_a_brake_only_a_newer_state_drives_again(supervisor, clock):
    _state(supervisor, clock.now)
    supervisor.brake('budget')
    assert supervisor.before_solve() == (SKIP, 'after_brake', -1, None)
    clock.now += 20 * MS
    _state(supervisor, clock.now)               # recovered: a newer state
    decision = supervisor.before_solve()
    assert decision.action == SOLVE
    assert supervisor.after_solve(decision.stamp_ns, True, 'ok').action == PUBLISH
    assert not supervisor.braking


def test_a_brake_during_the_solve_drops_the_plan(supervisor, clock):
    _state(supervisor, clock.now)
    decision = supervisor.before_solve()
    supervisor.brake('stale')                  # the watchdog, while the tick solves
    assert supervisor.after_solve(decision.stamp_ns, True, 'ok').action == SKIP
    assert supervisor.counts['commands'] == 0


@pytest.mark.parametrize('reason, expected', [('budget', 'budget'), ('solver: nan', 'failure')])
def test_a_missed_budget_or_failed_solve_brakes(supervisor, clock, reason, expected):
    _state(supervisor, clock.now)
    decision = supervisor.before_solve()
    after = supervisor.after_solve(decision.stamp_ns, False, reason)
    assert (after.action, after.reason) == (BRAKE, expected)


def test_the_state_going_stale_during_a_long_solve_brakes(supervisor, clock):
    _state(supervisor, clock.now)
    decision = supervisor.before_solve()
    clock.now += 300 * MS
    assert supervisor.after_solve(decision.stamp_ns, True, 'ok').action == BRAKE


def test_expected_delay_adds_age_solve_and_actuation_within_bounds(supervisor, clock):
    assert supervisor.expected_delay(clock.now - 30 * MS, 0.04, 0.05, 0.01) \
        == pytest.approx(0.08)
    assert supervisor.expected_delay(clock.now - 900 * MS, 0.2, 0.05, 0.0) \
        == pytest.approx(0.15)   # age capped at the stale timeout, solve at the budget
    assert supervisor.expected_delay(clock.now + 5 * MS, 9.0, 9.0, 9.0) == 0.5


def test_bad_timeout_is_refused():
    with pytest.raises(ValueError, match='stale_timeout_s'):
        CarSupervisor(float('nan'), Clock())
