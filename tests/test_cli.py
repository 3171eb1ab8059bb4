"""The command-line tools refuse a bad value by name, before anything is compiled or timed."""

import argparse

import pytest

from kernelgate import cli
from kernelgate.measure import metrics
from kernelgate.tune import layer_norm as tune
from kernelgate.tune import options


def test_argument_types_take_what_they_name():
    assert cli.positive_int("3") == 3
    assert cli.positive_float("0.5") == 0.5
    assert cli.shape("4096x5000") == "4096x5000"
    assert cli.regex("two_pass|fused") == "two_pass|fused"
    assert cli.shard("2/4") == (2, 4)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (cli.positive_int, "0", "must be at least 1"),
        (cli.positive_int, "-2", "must be at least 1"),
        (cli.positive_int, "two", "is not an integer"),
        (cli.positive_float, "0", "finite number above 0"),
        (cli.positive_float, "inf", "finite number above 0"),
        (cli.positive_float, "nan", "finite number above 0"),
        (cli.positive_float, "fast", "is not a number"),
        (cli.shape, "4096", "is not a shape MxN"),
        (cli.shape, "0x1024", "is not a shape MxN"),
        (cli.shape, "4096x-1", "is not a shape MxN"),
        (cli.shape, "axb", "is not a shape MxN"),
        (cli.regex, "two_pass(", "is not a regular expression"),
        (cli.shard, "3/2", "is not K/N"),
        (cli.shard, "0/2", "is not K/N"),
    ],
)
def test_argument_types_refuse_bad_values_by_name(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)


@pytest.mark.parametrize(
    ("main", "argv", "message"),
    [
        (options.main, ["--widths", "0", "--plan"], "argument --widths: '0': must be at least 1"),
        (options.main, ["--rounds", "0", "--plan"], "argument --rounds: '0': must be at least 1"),
        (tune.parse_args, ["--shapes", "4096", "--plan"], "argument --shapes: '4096' is not a shape MxN"),
        (tune.parse_args, ["--rep-ms", "0"], "argument --rep-ms: '0': must be a finite number above 0"),
        (metrics.main, ["layer_norm", "--dtypes", "float64"], "argument --dtypes: invalid choice: 'float64'"),
        (metrics.main, ["layer_norm", "--shapes", "8192x"], "argument --shapes: '8192x' is not a shape MxN"),
        (metrics.main, ["attention", "--configs", "long"], "argument --configs: invalid choice: 'long'"),
        (metrics.main, ["rms"], "argument SUITE: invalid choice: 'rms'"),
    ],
)
def test_tools_exit_with_the_argument_named(main, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
