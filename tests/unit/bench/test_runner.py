"""Policy names of `kvpin bench`: a kvpin policy may carry router settings to compare."""

import pytest

from kvpin.bench import processes, runner


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


def test_a_kvpin_policy_may_run_another_checkouts_build(tmp_path) -> None:
    """`@build=DIR` compares a change with the code before it, in one run."""
    with pytest.raises(FileNotFoundError, match="build= names a checkout's root"):
        runner.available_policies([f"kvpin@build={tmp_path}"])  # no .venv there
    script = tmp_path / ".venv" / "bin" / "kvpin"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    assert runner.available_policies([f"kvpin-x3@build={tmp_path}"]) == [
        f"kvpin-x3@build={tmp_path}"
    ]
    assert processes.kvpin_command(str(tmp_path)) == [str(script)]
    assert processes.kvpin_command()[0] != str(script)  # without: this interpreter's own
