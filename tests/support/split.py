"""How ``--shard K/N`` splits the tests: from node ids and ``compiles`` markers alone, so that every
runner computes the same split."""

import collections
import zlib


def shares(tests: list[tuple[str, str | None]], count: int) -> list[int]:
    """The share (0 to ``count - 1``) of each ``(node id, compile key)`` test.

    Tests with one compile key build the same kernels (tens of seconds each when the cache is
    cold), so they share a shard, which builds them once. Keys go largest first to the share with
    the fewest keyed tests; the other tests go by a hash of their node id."""
    sizes = collections.Counter(key for _, key in tests if key is not None)
    loads = [0] * count
    share_of = {}
    for key in sorted(sizes, key=lambda k: (-sizes[k], k)):
        target = min(range(count), key=lambda s: (loads[s], s))
        loads[target] += sizes[key]
        share_of[key] = target
    return [share_of[key] if key is not None else zlib.crc32(nodeid.encode()) % count for nodeid, key in tests]
