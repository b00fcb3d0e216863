"""The command line's own parsing (kvpin.cli)."""

import argparse

import pytest

from kvpin import cli


def test_seeds_are_listed_and_ranged_once_each_in_order() -> None:
    assert cli.seed_list("3") == [3]
    assert cli.seed_list("1-4,7, 2") == [1, 2, 3, 4, 7]


@pytest.mark.parametrize("text", ["", ",", "a", "1-b", "1--2", "4-2"])
def test_a_list_of_no_seeds_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"e\.g\. 1-4,7"):
        cli.seed_list(text)


def test_seeds_cannot_vary_a_trace_read_from_a_file() -> None:
    args = cli.build_parser().parse_args(["bench", "trace", "--trace", "t.jsonl", "--seeds", "1-2"])
    with pytest.raises(SystemExit, match="synthetic trace"):
        args.run(args)
