"""Outlier detection on an explicit clock: when a member is passed over, and for how long."""

from kvpin.router.outliers import Outliers, OutlierSettings


def test_an_unreachable_member_is_passed_over_until_its_ejection_expires() -> None:
    outliers = Outliers(OutlierSettings(eject_seconds=10))
    outliers.unreachable("ep", "pod-0", now=100.0)
    assert outliers.ejected("ep", 100.0) == {"pod-0"}
    assert outliers.ejected("ep", 109.9) == {"pod-0"}
    assert outliers.ejected("ep", 110.0) == set()  # back on the ring exactly at expiry
    assert outliers.ejected("other", 105.0) == set()


def test_consecutive_failures_eject_and_a_success_starts_the_count_again() -> None:
    outliers = Outliers(OutlierSettings(consecutive=3, eject_seconds=5))
    assert not outliers.failed("ep", "pod-1", 0.0)
    assert not outliers.failed("ep", "pod-1", 0.0)
    outliers.succeeded("ep", "pod-1")
    assert not outliers.failed("ep", "pod-1", 1.0)
    assert not outliers.failed("ep", "pod-1", 1.0)
    assert outliers.ejected("ep", 1.0) == set()
    assert outliers.failed("ep", "pod-1", 2.0)  # the third in a row
    assert outliers.ejected("ep", 6.9) == {"pod-1"}
    assert not outliers.failed("ep", "pod-1", 7.0)  # an ejection resets the count
    assert outliers.ejected("ep", 7.0) == set()


def test_forgetting_members_drops_their_failures_and_ejections() -> None:
    outliers = Outliers(OutlierSettings(consecutive=2))
    outliers.unreachable("ep", "pod-0", 0.0)
    outliers.unreachable("ep", "pod-1", 0.0)
    outliers.failed("ep", "pod-2", 0.0)
    outliers.forget("ep", {"pod-0", "pod-2"})
    assert outliers.ejected("ep", 1.0) == {"pod-1"}
    assert not outliers.failed("ep", "pod-2", 1.0)  # its earlier failure is gone
    outliers.forget("ep")
    assert outliers.ejected("ep", 1.0) == set()
