"""The Python side of compare.py's entry-point rows: one direct Collector + EpisodeStore collection in a
fresh process, the same work as one ``vcollect collect`` run, printing the collect call's steps/s.

    python benchmarks/entry_python.py ENV_ID BACKEND NUM_ENVS STEPS DATASET_ID ROOT SEED SHARD_STEPS

What the user would write: ``make_vector(env_id, num_envs, backend=...)``, a fresh ``EpisodeStore``
passed to the Collector as it is, and one ``collect(n_step=STEPS, random=True, reset_before_collect=True)``
call from a cold start, as the CLI makes. Only that call is timed (its ``CollectStats.collect_speed``),
as compare.py reads the ``steps/s`` the CLI prints for its one call; see ``entry_window`` there.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    env_id, backend, num_envs, steps, dataset_id, root, seed, shard_steps = argv
    import vcollect
    from vcollect.envs import make_vector
    from vcollect.store import EpisodeStore

    envs = make_vector(env_id, int(num_envs), backend=backend)
    store = EpisodeStore.create(
        dataset_id, envs.single_observation_space, envs.single_action_space, root=root,
        shard_steps=int(shard_steps), overwrite=True,
    )
    collector = vcollect.Collector(None, envs, store=store, seed=int(seed))
    try:
        stats = collector.collect(n_step=int(steps), random=True, reset_before_collect=True)
    finally:
        collector.close()
        store.close()
    print(f"steps/s {stats.collect_speed!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
