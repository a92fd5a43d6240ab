"""ResetSeeds: one stream of reset seeds per env id, independent of how the envs interleave."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vcollect.collecting.reset_seeds import BLOCK, SEED_HIGH, ResetSeeds


@given(
    seed=st.integers(0, 2**32),
    calls=st.lists(st.lists(st.integers(0, 4), unique=True, max_size=5), max_size=3 * BLOCK),
)
def test_each_env_gets_its_own_sequence_whatever_the_interleaving(seed: int, calls: list[list[int]]) -> None:
    seeds = ResetSeeds(5, seed)
    got: dict[int, list[int]] = {i: [] for i in range(5)}
    for env_ids in calls:
        peeked = seeds.peek(env_ids)
        taken = seeds.take(env_ids)
        assert peeked == taken  # peek shows exactly what take hands out next
        for env_id, value in zip(env_ids, taken):
            got[env_id].append(value)
    # Reference: every env's seeds taken alone, one at a time, from a twin made with the same seed.
    twin = ResetSeeds(5, seed)
    for env_id, values in got.items():
        assert values == [twin.take([env_id])[0] for _ in values]
        assert all(0 <= v < SEED_HIGH for v in values)


def test_streams_differ_between_envs_and_between_seeds() -> None:
    a = ResetSeeds(3, 0)
    firsts = a.take([0, 1, 2])
    assert len(set(firsts)) == 3
    assert ResetSeeds(3, 1).take([0, 1, 2]) != firsts
    assert ResetSeeds(3, 0).take([0, 1, 2]) == firsts
    assert a.take([0]) != firsts[:1]  # taking used the seed up


def test_upcoming_reads_the_same_seeds_as_peek_without_using_them() -> None:
    seeds = ResetSeeds(4, 7)
    env_ids = [3, 0, 2]
    view = seeds.upcoming(env_ids)
    assert len(view) == 3
    assert list(view) == [view[0], view[1], view[2]] == view[0:3] == seeds.peek(env_ids)
    assert view[1:] == seeds.peek([0, 2])
    shown = list(view)
    assert seeds.take(env_ids) == shown  # nothing was used up by reading the view
    assert list(view) != shown  # the view is live: it now shows the seeds after those


@given(
    seed=st.integers(0, 2**32),
    calls=st.lists(st.lists(st.integers(0, 3), unique=True, max_size=4), max_size=20),
)
def test_first_reset_only_hands_out_each_envs_first_seed_then_none(seed: int, calls: list[list[int]]) -> None:
    seeds = ResetSeeds(4, seed, every_reset=False)
    every = ResetSeeds(4, seed)
    taken_before: set[int] = set()
    for env_ids in calls:
        view = list(seeds.upcoming(env_ids))
        assert view == seeds.peek(env_ids)
        taken = seeds.take(env_ids)
        assert taken == view  # peek/upcoming show what take hands out
        for env_id, value in zip(env_ids, taken):
            if env_id in taken_before:
                assert value is None
            else:  # the first seed of the env's stream, as with every_reset=True
                assert value == every.take([env_id])[0]
                taken_before.add(env_id)
