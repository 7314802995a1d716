"""The fair share: how many of a migration's lanes one runner may hold while another waits.

Leases alone favour the runner that got there first: a lane that ends its slice
releases its partition and claims the next one a moment later, long before a
runner in another process polls again, so one process kept every lane. Instead,
a runner that wants a lane and cannot get one *asks* (a mark on the migration's
state that lapses by the server's clock), and while another runner asks, a
runner claims only below ``ceil(max_parallel / runners)``, counting every runner
that holds a lease or asks. Since every lane releases its partition at the end
of each slice and claims again, a runner over its share gives a lane back
within one slice, and that slot stays free for the runner that asked. A runner
alone (or among runners that want no more) takes every lane.
"""

from __future__ import annotations

from ..state.store import BackgroundStore


def fair_share(lanes: int, runners: int) -> int:
    """Each runner's share of ``lanes``, rounded up: the lanes are all used even when they do not divide."""
    return -(-lanes // max(1, runners))


async def may_claim(store: BackgroundStore, name: str, runner: str, lanes: int) -> bool:
    """Whether ``runner`` may claim another of the ``lanes`` of ``name`` now."""
    others = await store.asking(name, besides=runner)
    if not others:
        return True
    held = await store.leases_by_runner(name)
    runners = {r for r, n in held.items() if n} | set(others) | {runner}
    return held[runner] < fair_share(lanes, len(runners))
