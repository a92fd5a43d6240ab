"""``vcollect collect``: run a policy on N envs for exactly --steps or --episodes, optionally into a dataset,
here or on Ray workers (--ray-workers)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from rich.console import Console
from rich.text import Text

from vcollect.cli.checks import check_count, check_folder, check_seed
from vcollect.cli.datasets import check_replaceable
from vcollect.cli.exits import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, CommandParser, UsageError
from vcollect.cli.interrupts import GuardedSink, InterruptGuard
from vcollect.cli.output import stats_table
from vcollect.cli.sources import load_policy_factory, make_envs, qualified_env_id, resolve_env, vector_source
from vcollect.envs.base import TIMEOUT_HINT
from vcollect.envs.factory import RESTART_BACKENDS, TIMEOUT_BACKENDS
from vcollect.errors import (
    DatasetError,
    EnvSpecNotStoredWarning,
    EnvWorkerError,
    UnfinishedEpisodesWarning,
    VCollectError,
)
from vcollect.monitor import FiguresLog, TensorBoardMonitor

if TYPE_CHECKING:
    from vcollect.stats import CollectStats
    from vcollect.store import StoreOptions

#: What the collectors' warning about episodes still running (dropped) names for this command.
UNFINISHED_HINT = "--unfinished truncate"


def add_collect_parser(
    commands: argparse._SubParsersAction[CommandParser], *, backends: list[str], root_help: str
) -> None:
    """Add the ``collect`` command to ``commands``."""
    collect = commands.add_parser(
        "collect",
        help="run a policy on N envs for exactly --steps or --episodes; optionally store a dataset",
        description="Run a policy on N copies of an env for exactly --steps steps or --episodes episodes, "
        "with a progress bar, then print the CollectStats. With --dataset every finished episode is "
        "stored; without it the run only evaluates the policy. Ctrl-C stops cleanly and keeps every "
        "finished episode.",
    )
    collect.add_argument(
        "env_id", metavar="ENV_ID",
        help="a registered gymnasium env id (CartPole-v1), or module:EnvId to import the module registering it",
    )
    collect.add_argument("--num-envs", type=int, default=8, metavar="N", help="number of env copies (default: 8)")
    collect.add_argument(
        "--backend", choices=backends, default="subproc",
        help=f"vector-env backend: {', '.join(backends)} (default: subproc)",
    )
    collect.add_argument("--steps", type=int, metavar="N", help="collect exactly this many transitions")
    collect.add_argument("--episodes", type=int, metavar="N", help="collect exactly this many whole episodes")
    collect.add_argument(
        "--policy", default="random", metavar="SPEC",
        help="'random' (default), or module:callable, a factory called as factory(observation_space, "
        "action_space) that returns a policy(obs, state) -> (actions, state)",
    )
    collect.add_argument("--seed", type=int, default=None, metavar="S", help="seed of every reset and random action")
    collect.add_argument(
        "--seed-first-reset-only", action="store_true",
        help="seed only each env's first reset (as Tianshou and Minari do; faster with cheap envs): later "
        "episodes continue the env's generator and are stored with seed None, so they replay only in sequence",
    )
    collect.add_argument(
        "--unfinished", choices=("drop", "truncate"), default="drop",
        help="the episodes still running when the collection ends: drop (not stored; the summary says how many) "
        "or truncate (stored, their last step marked truncated, as Minari's DataCollector stores them)",
    )
    collect.add_argument("--dataset", metavar="ID", default=None, help="store episodes in dataset ns/name-vN")
    exists = collect.add_mutually_exclusive_group()
    exists.add_argument("--overwrite", action="store_true", help="replace the dataset if it exists")
    exists.add_argument("--append", action="store_true", help="add episodes to an existing dataset")
    collect.add_argument(
        "--async", dest="use_async", action="store_true",
        help="use AsyncCollector: act on whichever envs are ready instead of waiting for all",
    )
    collect.add_argument("--record-infos", action="store_true", help="store the envs' info dicts with each episode")
    collect.add_argument(
        "--ray-workers", type=int, default=None, metavar="N",
        help="collect on N Ray workers (--num-envs envs each), all writing into --dataset",
    )
    collect.add_argument(
        "--remote", default=None, metavar="URL",
        help="with --ray-workers: each worker uploads its shards to this remote (s3://, gs://, file://), no shared "
        "filesystem needed; the dataset's metadata is published there at the end",
    )
    collect.add_argument("--author", default=None, help="dataset metadata: author")
    collect.add_argument("--algorithm-name", default=None, help="dataset metadata: algorithm (default: the --policy)")
    collect.add_argument("--description", default=None, help="dataset metadata: description")
    collect.add_argument("--env-kwargs", default=None, metavar="JSON", help="keyword arguments for gymnasium.make")
    collect.add_argument(
        "--shard-steps", type=int, default=100_000, metavar="N",
        help="commit a shard every this many steps (default: 100000). A crash loses fewer than "
             "3 x (N + the longest episode) + 2048 steps of finished episodes: up to N pending, two shards "
             "being committed in the background, and 2048 steps queued by the collector",
    )
    collect.add_argument(
        "--compression", type=_compression_arg, default="auto", metavar="CODEC",
        help="shard column filter: auto (Zstandard for image-like uint8 columns such as Atari frames, the "
        "rest raw; the default), none, gzip, lzf, lz4, zstd, or a gzip level 0-9",
    )
    collect.add_argument(
        "--frame-stack", type=int, default=None, metavar="K",
        help="the env's observations are K-frame stacks (gymnasium's FrameStackObservation, K frames on the "
        "first axis): store each frame once and rebuild the stacks on read (about 1/K of the frame bytes)",
    )
    collect.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS",
        help="give up when an env step or reset has not returned after SECONDS: the subproc and ray backends "
        "stop the hung env's worker and fail with its env id; the in-process backends (dummy, gymnasium, "
        "envpool) cannot interrupt it, so the command ends after SECONDS without progress. Either way the "
        "exit status is 1 and the shards already committed are kept (default: wait forever)",
    )
    collect.add_argument(
        "--max-env-restarts", type=int, default=0, metavar="K",
        help="replace an env worker that dies or whose env raises (subproc and ray backends) up to K times in "
        "the run: the episode it was in is abandoned (not stored; the summary says so) and collection goes on "
        "with exact counts; past K the run fails as with 0 (default: 0, never restart)",
    )
    collect.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    collect.add_argument("--live", action="store_true",
                         help="show live figures beside the progress bar: steps/s, episodes, the mean return of "
                         "the last 100 episodes and the slowest env's step rate")
    collect.add_argument("--tensorboard", default=None, metavar="DIR",
                         help="write the live figures to TensorBoard event files in DIR (needs torch and "
                         "tensorboard)")
    collect.add_argument("--root", default=None, metavar="DIR", help=root_help)
    collect.set_defaults(handler=run_collect)


def _monitors(args: argparse.Namespace) -> list[Any]:
    """The live monitors --live and --tensorboard ask for (the figures beside the bar need one: a FiguresLog)."""
    monitors: list[Any] = []
    if args.tensorboard is not None:
        try:
            monitors.append(TensorBoardMonitor(args.tensorboard))
        except ImportError as exc:
            raise UsageError(f"--tensorboard: {exc}") from None
    elif args.live:
        monitors.append(FiguresLog())
    return monitors


def _collector_class(use_async: bool) -> Any:
    """Collector, or AsyncCollector for --async (UsageError when this vcollect has none)."""
    if not use_async:
        from vcollect.collector import Collector

        return Collector
    try:
        module = importlib.import_module("vcollect.async_collector")
        return module.AsyncCollector
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--async needs vcollect.async_collector.AsyncCollector, which is not available: {exc}") from None


def _count(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """(n_step, n_episode) from --steps/--episodes: exactly one, positive; else UsageError."""
    if (args.steps is None) == (args.episodes is None):
        raise UsageError("pass exactly one of --steps N or --episodes N")
    for name, value in (("--steps", args.steps), ("--episodes", args.episodes)):
        if value is not None:
            check_count(name, value)
    return args.steps, args.episodes


def _json_option(text: str | None, name: str) -> dict[str, Any]:
    """The JSON object an option such as --env-kwargs holds ({} when not given); UsageError if not one."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{name} must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{name} must be a JSON object, got {text!r}")
    return value


def _cannot_make(args: argparse.Namespace, exc: Exception) -> str:
    """The one line saying the envs could not be built, naming --env-kwargs when they were given."""
    with_kwargs = f" with --env-kwargs {args.env_kwargs}" if args.env_kwargs else ""
    reason = str(exc).partition("\n--- original traceback ---")[0]  # an EnvWorkerError's first part
    return f"cannot make {args.env_id} on backend {args.backend!r}{with_kwargs}: {reason}"


def run_collect(args: argparse.Namespace, console: Console) -> int:
    """``vcollect collect``: collect exactly --steps or --episodes, optionally into a dataset."""
    from vcollect.store import EpisodeStore, dataset_path, parse_dataset_id
    from vcollect.store.write.writer import DATASET_FILE

    n_step, n_episode = _count(args)
    check_count("--num-envs", args.num_envs)
    check_count("--shard-steps", args.shard_steps)
    check_seed("--seed", args.seed)
    if args.timeout is not None and not args.timeout > 0:  # also NaN
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.max_env_restarts < 0:
        raise UsageError(f"--max-env-restarts must be >= 0, got {args.max_env_restarts}")
    if args.max_env_restarts and args.backend not in RESTART_BACKENDS:
        raise UsageError(
            f"--max-env-restarts needs a backend that runs each env in a process it can replace "
            f"({', '.join(sorted(RESTART_BACKENDS))}), not {args.backend!r}"
        )
    env_kwargs = _json_option(args.env_kwargs, "--env-kwargs")
    args.env_id = qualified_env_id(args.env_id, args.backend)  # ALE/Pong-v5 -> ale_py:ALE/Pong-v5
    env_factory, env_spec = resolve_env(args.env_id, env_kwargs, args.backend)
    if args.dataset is not None:
        parse_dataset_id(args.dataset)
        exists = (dataset_path(args.dataset, args.root) / DATASET_FILE).is_file()
        if exists and not (args.overwrite or args.append):
            raise UsageError(f"dataset {args.dataset!r} exists; pass --append to add to it or --overwrite to replace it")
        if args.append and not exists:
            raise UsageError(f"--append: no dataset {args.dataset!r} under {str(dataset_path(args.dataset, args.root))!r}")
        if exists and args.overwrite:
            check_replaceable(args.dataset, args.root)
    elif args.append or args.overwrite or args.record_infos:
        raise UsageError("--append, --overwrite and --record-infos need --dataset ID")
    if (args.live or args.tensorboard is not None) and args.ray_workers is not None:
        raise UsageError("--live and --tensorboard watch one local collector; they are not supported with --ray-workers")
    if args.tensorboard is not None:
        check_folder("--tensorboard", args.tensorboard)
    policy_factory = None if args.policy == "random" else load_policy_factory(args.policy)
    collector_class = _collector_class(args.use_async)  # here too for --ray-workers: said as --async, not collector=
    if args.remote is not None and args.ray_workers is None:
        raise UsageError("--remote applies to --ray-workers (without it, collect here and run 'vcollect upload')")
    if args.ray_workers is not None:
        if args.timeout is not None:
            raise UsageError("--timeout is not supported with --ray-workers")
        return run_collect_distributed(args, console, env_factory, env_spec, env_kwargs, policy_factory, n_step, n_episode)

    guard = InterruptGuard()
    store: Any = None
    before = 0
    cut = (0, 0)  # episodes still running at the end, and their steps
    try:
        with guard, contextlib.ExitStack() as cleanup:
            try:
                envs = _make_envs(args, env_kwargs)
            except (ImportError, ValueError, TypeError, gym.error.Error, EnvWorkerError) as exc:
                # a missing extra or env dependency, an id the backend lacks, --env-kwargs the env refuses
                # (in a worker process: EnvWorkerError, whose worker traceback is not the user's business)
                if isinstance(exc, EnvWorkerError) and guard.interrupted:
                    raise
                raise UsageError(_cannot_make(args, exc)) from None
            cleanup.callback(envs.close)
            policy = None
            if policy_factory is not None:
                try:
                    policy = policy_factory(envs.single_observation_space, envs.single_action_space)
                except Exception as exc:
                    raise UsageError(f"policy factory {args.policy!r} raised {type(exc).__name__}: {exc}") from None
                if not callable(policy):
                    raise UsageError(f"policy factory {args.policy!r} returned {type(policy).__name__}, not a policy")
            if args.record_infos and (envs.capabilities.steps_all_envs or envs.capabilities.autoresets):
                raise UsageError(
                    f"--record-infos needs a backend that steps and resets each env on request; {args.backend!r} "
                    "steps all envs at once or resets them by itself (use dummy or subproc)"
                )
            sink = None
            if args.dataset is not None:
                store = _open_store(args, envs, env_spec, EpisodeStore)
                cleanup.callback(store.close)
                before = len(store.shards_written)
                sink = GuardedSink(store, guard)
            monitors = _monitors(args)
            for monitor in monitors:
                if isinstance(monitor, TensorBoardMonitor):
                    cleanup.callback(monitor.close)
            with warnings.catch_warnings():  # a spec that cannot be stored was said when the store was made
                warnings.simplefilter("ignore", EnvSpecNotStoredWarning)
                collector = collector_class(
                    policy, envs, store=sink, seed=args.seed, record_infos=args.record_infos,
                    seed_every_reset=not args.seed_first_reset_only, unfinished=args.unfinished,
                    unfinished_hint=UNFINISHED_HINT, monitor=monitors or None,
                )
            watchdog = None
            if args.timeout is not None and args.backend not in TIMEOUT_BACKENDS:
                watchdog = _Watchdog(args.timeout, functools.partial(_hang_message, args, store))
                watchdog.watch(envs)
                cleanup.callback(watchdog.stop)
            try:
                stats = collector.collect(
                    n_step=n_step,
                    n_episode=n_episode,
                    random=policy is None,
                    reset_before_collect=True,
                    progress=not args.no_progress,
                    keep_episode_stats=False,  # the summary needs only their moments, however long the run
                )
            finally:
                if watchdog is not None:
                    watchdog.stop()  # closing (the last shard's commit) is not an env call
                guard.saving()
                running = collector.buffer.unfinished() if store is not None else np.zeros(0, np.int64)
                cut = (running.size, int(collector.buffer.episode_lengths[running].sum()))
                with warnings.catch_warnings():  # the summary below says what became of them
                    warnings.simplefilter("ignore", UnfinishedEpisodesWarning)
                    collector.close()
    except BaseException as exc:
        # A VCollectError after a SIGINT: e.g. the env workers got the terminal's Ctrl-C first and died.
        interrupted = isinstance(exc, KeyboardInterrupt) or (isinstance(exc, VCollectError) and guard.interrupted)
        removed = _remove_if_empty(args, store)
        if interrupted:
            _report_interrupt(args, store, removed)
            return EXIT_INTERRUPTED
        if isinstance(exc, EnvWorkerError) and TIMEOUT_HINT in str(exc):  # said as this command's option
            text = str(exc).partition(": ")[2].replace(TIMEOUT_HINT, "pass a larger --timeout (or none to wait forever)")
            raise EnvWorkerError(exc.env_id, text) from None
        raise
    collector_name = "AsyncCollector" if args.use_async else "Collector"
    console.print(stats_table(stats, args.env_id, f"{args.num_envs} x {args.backend}, {collector_name}"))
    _say_abandoned(console, stats)
    if store is not None:
        note = ""
        if cut[0] and args.unfinished == "drop":
            note = f" ({cut[0]} episodes still running at the end, {cut[1]:,} steps, were not stored: --unfinished truncate stores them)"
        elif cut[0]:
            note = f" (including {cut[0]} episodes still running at the end, stored with their last step marked truncated)"
        surplus = store.committed_episodes - stats.n_collected_episodes - (cut[0] if args.unfinished == "truncate" else 0)
        if surplus > 0:
            note += (
                f" (including {surplus} episodes the backend finished beyond the count: it steps every env, also "
                "those that had met their quota, until the last one has)"
            )
        console.print(
            Text(
                f"dataset {args.dataset}: wrote {store.committed_episodes:,} episodes ({store.committed_steps:,} steps) "
                f"(shards committed: {len(store.shards_written) - before}) to {store.path}{note}"
            )
        )
    return EXIT_OK


def _make_envs(args: argparse.Namespace, env_kwargs: Mapping[str, Any]) -> Any:
    """make_envs, with --timeout for the backends that take one (TIMEOUT_BACKENDS) and --max-env-restarts
    (checked to be 0 or for RESTART_BACKENDS)."""
    timeout = args.timeout if args.backend in TIMEOUT_BACKENDS else None
    if timeout is None and not args.max_env_restarts:
        return make_envs(args.env_id, args.num_envs, args.backend, env_kwargs)
    from vcollect.envs import make_vector

    source = vector_source(args.env_id, args.backend, env_kwargs)
    return make_vector(
        source.env, args.num_envs, backend=args.backend, env_kwargs=source.env_kwargs, timeout=timeout,
        max_restarts=args.max_env_restarts,
    )


class _Watchdog:
    """--timeout for the in-process backends, whose env calls cannot be interrupted: a thread that ends the
    process (exit status 1, one line on stderr) when no env call has returned for `seconds`.

    It ends the process with os._exit, from its own thread: the main thread is stuck in the env (or the
    policy) and cannot be made to raise. Nothing is written then: the store is not thread-safe, and the
    main thread might be stuck inside it; the shards already committed are complete files listed in the
    dataset's manifest (every commit is atomic), so they stay readable; episodes not yet committed (the
    --shard-steps help gives the bound) are lost, as in a crash.
    """

    _CALLS = ("reset", "step", "step_reset", "step_all", "step_into", "send", "recv", "reset_async", "recv_reset", "recv_any")

    def __init__(self, seconds: float, message: Callable[[float], str]) -> None:
        self.seconds = seconds
        self._message = message
        self._last = time.monotonic()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, envs: Any) -> None:
        """Count every return of an env call of envs (its methods wrapped on the instance) as progress,
        and start watching."""
        for name in self._CALLS:
            method = getattr(envs, name, None)
            if callable(method):
                setattr(envs, name, self._beating(method))
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="vcollect-collect-timeout", daemon=True)
        self._thread.start()

    def _beating(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            finally:
                self._last = time.monotonic()

        return call

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while True:
            remaining = self._last + self.seconds - time.monotonic()
            if remaining <= 0:
                break
            if self._stopped.wait(remaining):
                return
        if self._stopped.is_set():
            return
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.write(f"\nvcollect collect: error: {self._message(time.monotonic() - self._last)}\n")
            sys.stderr.flush()
        os._exit(EXIT_FAILURE)


def _hang_message(args: argparse.Namespace, store: Any, idle: float) -> str:
    """The one line the --timeout watchdog prints before it ends the process."""
    message = (
        f"no env step or reset (nor the policy) returned for {idle:.3g} s (--timeout {args.timeout:g}); the "
        f"{args.backend} backend runs the envs in this process and cannot interrupt them, so the command was ended"
    )
    if store is None:
        return message + (" (no --dataset: nothing was stored)" if args.dataset is None else "")
    settled = False
    with contextlib.suppress(Exception):  # a shard the commit thread is renaming now counts as committed
        settled = store.wait_for_commits(5.0)
    kept = "keeps its" if settled else "keeps at least its"
    return message + (
        f"; dataset {args.dataset} {kept} {store.committed_episodes:,} committed episodes "
        f"({store.committed_steps:,} steps){'' if settled else ' (a shard commit was still running)'}, "
        "episodes not yet committed were lost"
    )


def run_collect_distributed(
    args: argparse.Namespace,
    console: Console,
    env_factory: Callable[[], gym.Env] | None,
    env_spec: Any,
    env_kwargs: Mapping[str, Any],
    policy_factory: Callable[..., Any] | None,
    n_step: int | None,
    n_episode: int | None,
) -> int:
    """``vcollect collect --ray-workers N``: one Collector per Ray worker, all appending to one dataset."""
    from vcollect.store import EpisodeStore

    check_count("--ray-workers", args.ray_workers)
    if args.remote is not None and args.dataset is None:
        raise UsageError("--remote needs --dataset: the dataset whose shards the workers upload")
    if args.record_infos:
        raise UsageError("--record-infos is not supported with --ray-workers")
    try:
        from vcollect.distributed import DistributedCollector
        from vcollect.envs.ray_env import require_ray

        require_ray()
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if args.dataset is not None and not args.append:
        if env_factory is None:  # an EnvPool task id: a pool of one env gives the spaces
            pool = make_envs(args.env_id, 1, args.backend, env_kwargs)
            spaces = _Spaces(pool.single_observation_space, pool.single_action_space)
            pool.close()
        else:
            env = env_factory()
            try:
                spaces = _Spaces(env.observation_space, env.action_space)
            finally:
                env.close()
        _open_store(args, spaces, env_spec, EpisodeStore).close()
    source = vector_source(args.env_id, args.backend, env_kwargs, in_this_process=False)
    collector = DistributedCollector(
        source.env,
        policy_factory,
        env_kwargs=source.env_kwargs,
        num_workers=args.ray_workers,
        envs_per_worker=args.num_envs,
        backend=args.backend,
        store=args.dataset,
        root=args.root,
        seed=args.seed,
        collector="async" if args.use_async else "sync",
        seed_every_reset=not args.seed_first_reset_only,
        unfinished=args.unfinished,
        unfinished_hint=UNFINISHED_HINT,
        store_options=_store_options(args),
        backend_kwargs={"max_restarts": args.max_env_restarts} if args.max_env_restarts else None,
        remote=args.remote,
    )
    try:
        stats = collector.collect(
            n_step=n_step, n_episode=n_episode, random=policy_factory is None,
            keep_episode_stats=False,  # the summary needs only their moments: workers ship no per-episode arrays
        )
    finally:
        collector.close()
    where = f"{args.ray_workers} Ray workers x {args.num_envs} x {args.backend}"
    console.print(stats_table(stats, args.env_id, where))
    _say_abandoned(console, stats)
    if args.dataset is not None:
        done = "appended" if args.append else "wrote"
        console.print(Text(f"dataset {args.dataset}: {done} {stats.n_collected_episodes:,} episodes"))
    return EXIT_OK


def _say_abandoned(console: Console, stats: CollectStats) -> None:
    """One line on the episodes given up because their env workers were restarted (none: nothing)."""
    if stats.abandoned:
        first = stats.abandoned[0]
        console.print(
            Text(
                f"abandoned {stats.n_abandoned_episodes} episodes ({sum(a.steps for a in stats.abandoned):,} steps, not "
                f"stored) whose env workers were restarted; the first, env {first.env_id}: {first.error.splitlines()[0]}"
            )
        )


def _compression_arg(text: str) -> str | int:
    """--compression's value: a codec name, or a gzip level given as digits."""
    from vcollect.store.write.compression import check_compression

    value: str | int = int(text) if text.isdigit() else text
    try:
        return check_compression(value)  # type: ignore[return-value]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


@dataclasses.dataclass(frozen=True)
class _Spaces:
    """The two spaces _open_store reads, for when no vector env exists on the driver."""

    single_observation_space: gym.Space[Any]
    single_action_space: gym.Space[Any]


def _store_options(args: argparse.Namespace) -> StoreOptions:
    """The StoreOptions of --shard-steps and --compression, for the local store and every Ray worker's."""
    from vcollect.store import StoreOptions

    # background commits: shards committed off the collect loop; a failed one still ends the command
    return StoreOptions(shard_steps=args.shard_steps, compression=args.compression, background_commits=True)


def _open_store(args: argparse.Namespace, envs: Any, env_spec: Any, store_class: Any) -> Any:
    """The --dataset store for envs of these spaces: opened for --append, else created with the run's metadata."""
    if args.append:
        return store_class.open(
            args.dataset, args.root,
            observation_space=envs.single_observation_space,
            action_space=envs.single_action_space,
            options=_store_options(args),
        )
    metadata: dict[str, Any] = {
        "algorithm_name": args.algorithm_name or args.policy,
        "collection": {
            "env_id": args.env_id,
            "num_envs": args.num_envs,
            "backend": args.backend,
            "policy": args.policy,
            "seed": args.seed,
            "seed_every_reset": not args.seed_first_reset_only,
            "unfinished": args.unfinished,
            "collector": "async" if args.use_async else "sync",
        },
    }
    if args.author is not None:
        metadata["author"] = args.author
    if args.description is not None:
        metadata["description"] = args.description
    spec_json = _spec_json(args, env_spec)
    if args.frame_stack is not None:  # a stack size the env's observations do not have is a usage error
        from vcollect.store.write.frame_stack import frame_stack_of

        try:
            frame_stack_of(args.frame_stack, envs.single_observation_space)
        except ValueError as exc:
            raise UsageError(f"--frame-stack: {exc}") from None
    return store_class.create(
        args.dataset,
        envs.single_observation_space,
        envs.single_action_space,
        env_spec=spec_json,
        root=args.root,
        metadata=metadata,
        overwrite=args.overwrite,
        options=_store_options(args),
        frame_stack=args.frame_stack,  # with --append the dataset's own layout applies
    )


def _spec_json(args: argparse.Namespace, env_spec: Any) -> str | None:
    """The env spec's JSON to store with the dataset; where there is none to store (a callable entry point,
    kwargs that are not JSON-able, an EnvPool task id gymnasium does not know), one warning line on stderr
    saying what the dataset will lack."""
    from vcollect.store.write.env_spec_record import UNSTORED_SPEC_LACKS, env_spec_json

    if env_spec is None:
        _warning_line(f"EnvPool task {args.env_id!r} has no gymnasium env spec to store with the dataset, so "
                      f"{UNSTORED_SPEC_LACKS}")
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EnvSpecNotStoredWarning)
        spec_json = env_spec_json(env_spec)
    for warning in caught:
        _warning_line(str(warning.message))
    return spec_json


def _warning_line(message: str) -> None:
    """``vcollect collect: warning: MESSAGE`` on stderr, on one line."""
    print(f"vcollect collect: warning: {' '.join(message.split())}", file=sys.stderr)


def _remove_if_empty(args: argparse.Namespace, store: Any) -> bool:
    """After a failed or interrupted run, delete the dataset this run created if it holds no episode."""
    if store is None or args.append or store.committed_episodes:
        return False
    from vcollect.store import delete_dataset
    from vcollect.store.layout.dataset_dir import read_identity
    from vcollect.store.layout.naming import resolve_root

    with contextlib.suppress(DatasetError, OSError):
        # only the dataset this run made: a concurrent --overwrite may have put another one in its place
        if read_identity(store.path, args.dataset, resolve_root(args.root)) != store.identity:
            return False
        delete_dataset(args.dataset, args.root)
        return True
    return False


def _report_interrupt(args: argparse.Namespace, store: Any, removed: bool) -> None:
    """Say on stderr what a Ctrl-C left: nothing, a removed empty dataset, or the episodes saved."""
    if store is None:
        message = "interrupted; nothing was stored" + ("" if args.dataset else " (no --dataset)")
    elif removed:
        message = f"interrupted before any episode finished; the empty dataset {args.dataset} was removed"
    else:
        message = (
            f"interrupted; {store.committed_episodes:,} episodes ({store.committed_steps:,} steps) were saved "
            f"to dataset {args.dataset} (every episode finished before Ctrl-C)"
        )
    print(f"vcollect collect: {message}", file=sys.stderr)

