"""Where the CPU time of benchmarks/tianshou_trainers.py's runs goes, per side: gradient steps, collection,
test episodes, buffer sampling, the n-step reads, the target networks' forward passes, logging.

Each run of tianshou_trainers.py (same setup, seed, budget) is timed with ``time.process_time`` around the
calls of each part, exclusive of the parts nested in it (the buffer reads inside the n-step return are
counted as buffer reads, not as the n-step computation around them). Parts:

- ``gradient``: the algorithm's ``_update_with_batch`` (losses, backward passes, optimizer steps, target
  network syncs), identical on both sides;
- ``target_forward``: the n-step return's ``_target_q`` less its buffer reads (the target networks' forward
  passes), identical on both sides;
- ``nstep_rest``: the rest of ``_preprocess_batch`` (Tianshou's n-step arithmetic);
- ``sample``, ``getitem``, ``next``, ``unfinished_index``, ``hasnull``, ``arrays``: the buffer's ``sample``,
  indexing, ``next``, ``unfinished_index``, ``hasnull`` (the trainer's check after every collect) and the
  whole-buffer ``rew`` / ``done`` arrays;
- ``collect``, ``test``: the training and the test collector's ``collect`` (n_step / n_episode calls);
- ``logging``: the logger's ``log_*`` / ``save_data`` and the best-policy save;
- ``other``: the rest of the run (the trainer's own bookkeeping).

Usage:
    python benchmarks/tianshou_split.py --algo dqn sac [--fixed-steps N]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tianshou_trainers  # noqa: E402

_spent: dict[str, float] = defaultdict(float)
_calls: dict[str, int] = defaultdict(int)
_stack: list[list[Any]] = []  # [part, start, time of nested parts]


def _timed(part: str | Any, fn: Any) -> Any:
    """``fn`` with its CPU time, less that of timed calls inside it, added to ``part`` (or ``part(args)``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        name = part(*args, **kwargs) if callable(part) else part
        start = time.process_time()
        _stack.append([name, start, 0.0])
        try:
            return fn(*args, **kwargs)
        finally:
            frame = _stack.pop()
            total = time.process_time() - start
            _spent[name] += total - frame[2]
            _calls[name] += 1
            if _stack:
                _stack[-1][2] += total

    return wrapper


def _patch(cls: type, name: str, part: Any) -> None:
    owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
    if owner is None:
        return
    attr = owner.__dict__[name]
    if isinstance(attr, property):
        setattr(owner, name, property(_timed(part, attr.fget)))
    else:
        setattr(owner, name, _timed(part, attr))


def _instrument(side: str) -> None:
    import tianshou.utils.logger.logger_base as logger_base
    import torch
    from tianshou.algorithm import DQN, SAC

    for algo in (DQN, SAC):
        _patch(algo, "_update_with_batch", "gradient")
        _patch(algo, "_preprocess_batch", "nstep_rest")
        _patch(algo, "_target_q", "target_forward")
    for name in ("log_train_data", "log_test_data", "log_update_data", "log_info_data", "save_data"):
        _patch(logger_base.BaseLogger, name, "logging")
    torch.save = _timed("logging", torch.save)
    Collector, Buffer = tianshou_trainers.side_imports(side)
    _patch(Collector, "collect", lambda self, n_step=None, n_episode=None, *a, **k: "test" if n_episode else "collect")
    for name in ("sample", "next", "unfinished_index", "hasnull"):
        _patch(Buffer, name, name)
    _patch(Buffer, "__getitem__", "getitem")
    for name in ("rew", "done", "__getattr__"):  # Tianshou's buffer reads its arrays through __getattr__
        _patch(Buffer, name, "arrays")


def _child(algo: str, side: str, fixed_steps: int | None) -> None:
    import torch

    torch.set_num_threads(1)
    _instrument(side)
    result = tianshou_trainers.RUNS[algo](side, fixed_steps)
    parts = dict(_spent)
    parts["other"] = result["cpu_s"] - sum(parts.values())
    print(json.dumps({**result, "parts": parts, "calls": dict(_calls)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", choices=("dqn", "sac"), default=["dqn", "sac"])
    parser.add_argument("--sides", nargs="+", choices=("tianshou", "vcollect"), default=["tianshou", "vcollect"])
    parser.add_argument("--fixed-steps", type=int, default=None)
    parser.add_argument("--child", nargs=2, metavar=("ALGO", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], args.fixed_steps)
        return
    for algo in args.algo:
        results = {}
        for side in args.sides:
            results[side] = tianshou_trainers.run_child(__file__, algo, side, args.fixed_steps, 7200)
            print(json.dumps({"algo": algo, "side": side, **results[side]}), flush=True)
        if len(results) == 2:
            t, v = results["tianshou"], results["vcollect"]
            # the parts whose code is the same on both sides (Tianshou's algorithm, trainer and logger)
            same = ("gradient", "target_forward", "nstep_rest", "logging", "other")
            fixed = sum(t["parts"].get(part, 0.0) for part in same)
            print(json.dumps({
                "algo": algo, "cpu_speedup": t["cpu_s"] / v["cpu_s"],
                # vcollect's collection, test episodes and buffer reads at zero, the rest as Tianshou's run spent it
                "bound_speedup": t["cpu_s"] / fixed, "tianshou_same_code_share": fixed / t["cpu_s"],
            }), flush=True)


if __name__ == "__main__":
    main()
