"""``python -m tests.entry_spy ARGS``: the ``vcollect`` command (``vcollect.cli.main(ARGS)``), with what every
``Collector.collect`` call reported recorded for the entry-point invariant tests (tests/test_entry_points.py).

The spy only records: after each ``collect`` call (Collector and AsyncCollector alike; AsyncCollector does not
override it) it appends one JSON line to the file named by ``$VCOLLECT_STATS_SPY`` with the call's CollectStats
(steps, episodes, the per-episode returns and lengths), the transitions the collector still holds for a later
call (``pending_transitions``), its number of envs, the class name of its step loop, whether its vector env
declares ``split_step_reset`` and how many steps the call sent through ``send_step_reset`` (the overlapped
path: each step's next actions sent before the step is recorded). The CLI keeps only
running summaries of its episodes (``keep_episode_stats=False``); the spy asks for the per-episode arrays.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

STATS_FILE_ENV = "VCOLLECT_STATS_SPY"


def record_calls(path: str) -> None:
    """Wrap Collector.collect so that every call's report is appended to ``path`` (one JSON object a line)."""
    from vcollect.collector import Collector
    from vcollect.envs.subproc import SubprocVectorEnv

    collect = Collector.collect
    send_step_reset = SubprocVectorEnv.send_step_reset
    sent = [0]

    @functools.wraps(send_step_reset)
    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return send_step_reset(self, *args, **kwargs)

    @functools.wraps(collect)
    def spied(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["keep_episode_stats"] = True  # the per-episode report the invariants compare with the store
        sent[0] = 0
        stats = collect(self, *args, **kwargs)
        line = {
            "n_collected_steps": int(stats.n_collected_steps),
            "n_collected_episodes": int(stats.n_collected_episodes),
            "returns": [float(r) for r in stats.returns],
            "lens": [int(n) for n in stats.lens],
            "pending_transitions": int(self.pending_transitions),
            "num_envs": int(self.num_envs),
            "loop": type(self._loop).__name__,
            "split_step_reset": bool(self.envs.capabilities.split_step_reset),
            "sent_step_resets": sent[0],
        }
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")
        return stats

    Collector.collect = spied  # type: ignore[method-assign]
    SubprocVectorEnv.send_step_reset = counted  # type: ignore[method-assign]


def read_calls(path: str) -> list[dict[str, Any]]:
    """What ``record_calls`` wrote, one dict per collect call, in call order ([] when no call was made)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def main(argv: list[str]) -> int:
    record_calls(os.environ[STATS_FILE_ENV])
    from vcollect.cli import main as vcollect_main

    return int(vcollect_main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
