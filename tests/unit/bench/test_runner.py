"""Policy names of `kvpin bench`: a kvpin policy may carry router settings to compare."""

import pytest

from kvpin.bench import runner


def test_a_kvpin_policy_carries_settings_side_by_side_with_the_default() -> None:
    assert runner.split_policy("kvpin") == ("kvpin", {})
    assert runner.split_policy("kvpin-x3@moveMargin=1@loadFactor=3") == (
        "kvpin-x3", {"moveMargin": 1, "loadFactor": 3}
    )  # fmt: skip
    assert runner.split_policy("kvpin@keepHomes=false") == ("kvpin", {"keepHomes": False})
    assert runner.split_policy("sglang-router:cache_aware") == ("sglang-router:cache_aware", {})


@pytest.mark.parametrize("policy", ["round-robin@x=1", "kvpin@moveMargin", "kvpin@=1"])
def test_a_setting_on_anything_else_or_without_a_value_is_refused(policy: str) -> None:
    with pytest.raises(ValueError, match="as @name=value"):
        runner.available_policies([policy])
