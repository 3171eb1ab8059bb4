"""Argument types for the command-line tools: a bad value is refused by argparse, naming the
argument and what it takes, before anything is compiled or timed."""

import argparse
import re


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number above 0")
    return value


def shape(text: str) -> str:
    """A shape as the cases name it, MxN: M rows of N elements, both at least 1."""
    rows, _, width = text.partition("x")
    if not (rows.isdigit() and width.isdigit() and int(rows) > 0 and int(width) > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape MxN of positive integers, e.g. 4096x5000")
    return f"{int(rows)}x{int(width)}"


def regex(text: str) -> str:
    """A regular expression, as asv's ``--bench`` and the PR check match case ids with it."""
    try:
        re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {err}") from None
    return text


def shard(text: str) -> tuple[int, int]:
    """This runner's share of a split PR check, K/N: the K-th of N shards."""
    match = re.fullmatch(r"(\d+)/(\d+)", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N with 1 <= K <= N")
    return int(match[1]), int(match[2])
