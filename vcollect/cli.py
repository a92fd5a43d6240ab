"""The ``vcollect`` command: collect experience into datasets, inspect, transform, export and benchmark.

Commands: collect, list, show, combine, split, export, import-minari, delete, bench (``--help`` on each).
Bad input (unknown env id or dataset, malformed dataset id, a policy that does not import, bad options)
prints one line on stderr and exits with status 2; a failure while running (an env that raised) exits 1;
Ctrl-C during ``collect`` keeps every finished episode and exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from vcollect.errors import (
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    SpaceMismatchError,
    VCollectError,
)
from vcollect.stats import CollectStats, SummaryStats

if TYPE_CHECKING:
    from vcollect.envs.base import VectorEnv
    from vcollect.store import EpisodeStore

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A mistake in the command line or its inputs: reported on one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a parse error is one line on stderr (no usage block) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        text = " ".join(message.split())
        self.exit(EXIT_USAGE, f"{self.prog}: error: {text} (see '{self.prog} --help')\n")


def _backends() -> list[str]:
    """Vector-env backends available in this installation (``vcollect.envs.factory``)."""
    from vcollect.envs.factory import BACKENDS, FROM_ENV_ID

    return sorted({*BACKENDS, *FROM_ENV_ID})




# ---------------------------------------------------------------------------------------------------
# parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``vcollect`` command."""
    from vcollect import __version__

    parser = _Parser(
        prog="vcollect",
        description="Collect RL experience from many environments at once into crash-safe datasets.",
        epilog="Datasets live under --root, else $VCOLLECT_DATASETS_PATH, else ~/.vcollect/datasets.",
    )
    parser.add_argument("--version", action="version", version=f"vcollect {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    root_help = "datasets folder (default: $VCOLLECT_DATASETS_PATH, else ~/.vcollect/datasets)"
    backends = _backends()

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
    collect.add_argument("--author", default=None, help="dataset metadata: author")
    collect.add_argument("--algorithm-name", default=None, help="dataset metadata: algorithm (default: the --policy)")
    collect.add_argument("--description", default=None, help="dataset metadata: description")
    collect.add_argument("--env-kwargs", default=None, metavar="JSON", help="keyword arguments for gymnasium.make")
    collect.add_argument(
        "--shard-steps", type=int, default=100_000, metavar="N",
        help="commit a shard every this many steps (the most a crash can lose; default: 100000)",
    )
    collect.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    collect.add_argument("--root", default=None, metavar="DIR", help=root_help)
    collect.set_defaults(handler=run_collect)

    list_cmd = commands.add_parser(
        "list", help="table of local datasets",
        description="A table of the datasets under the root: id, episodes, steps, size on disk, author, created.",
    )
    list_cmd.add_argument("--root", default=None, metavar="DIR", help=root_help)
    list_cmd.set_defaults(handler=run_list)

    show = commands.add_parser(
        "show", help="a dataset's metadata, spaces, counts and statistics",
        description="A dataset's metadata, spaces, counts and return/length statistics; --plot writes a "
        "figure with the return and length histograms and the return per episode (needs matplotlib).",
    )
    show.add_argument("dataset_id", metavar="ID")
    show.add_argument("--plot", metavar="FILE.png", default=None, help="write the figure to this file")
    show.add_argument("--root", default=None, metavar="DIR", help=root_help)
    show.set_defaults(handler=run_show)

    combine = commands.add_parser(
        "combine", help="copy the episodes of several datasets into a new one",
        description="Copy the episodes of datasets (with equal spaces) into a new dataset, in order.",
    )
    combine.add_argument("dataset_ids", metavar="ID", nargs="+")
    combine.add_argument("--into", metavar="NEW_ID", required=True, help="id of the new dataset")
    combine.add_argument("--root", default=None, metavar="DIR", help=root_help)
    combine.set_defaults(handler=run_combine)

    split = commands.add_parser(
        "split", help="split a dataset's episodes at random into new datasets",
        description="Shuffle a dataset's episodes and copy disjoint parts of the given sizes into new "
        "datasets. Sizes are episode counts (--sizes 800,200) or percentages of the episodes "
        "(--sizes 80%,20%).",
    )
    split.add_argument("dataset_id", metavar="ID")
    split.add_argument("--sizes", required=True, metavar="SIZES", help="comma-separated episode counts, or percentages with %%")
    split.add_argument("--into", metavar="NEW_ID", nargs="+", required=True, help="one new dataset id per size")
    split.add_argument("--seed", type=int, default=None, help="seed of the shuffle")
    split.add_argument("--root", default=None, metavar="DIR", help=root_help)
    split.set_defaults(handler=run_split)

    export = commands.add_parser(
        "export", help="write a dataset in another format (Minari)",
        description="Write a dataset as a Minari 0.5 HDF5 dataset that minari.load_dataset reads.",
    )
    export.add_argument("dataset_id", metavar="ID")
    export.add_argument("--format", choices=["minari"], required=True, help="target format")
    export.add_argument("--minari-id", default=None, help="the Minari dataset id (default: ID)")
    export.add_argument(
        "--minari-root", default=None, metavar="DIR", help="Minari datasets folder (default: $MINARI_DATASETS_PATH, else ~/.minari/datasets)"
    )
    export.add_argument("--overwrite", action="store_true", help="replace the Minari dataset if it exists")
    export.add_argument("--root", default=None, metavar="DIR", help=root_help)
    export.set_defaults(handler=run_export)

    imp = commands.add_parser(
        "import-minari", help="copy a Minari dataset into a new vcollect dataset",
        description="Copy a Minari HDF5 dataset (a Minari id under --minari-root, or a path) into a new dataset.",
    )
    imp.add_argument("source", metavar="PATH_OR_ID")
    imp.add_argument("--into", metavar="ID", required=True, help="id of the new vcollect dataset")
    imp.add_argument("--minari-root", default=None, metavar="DIR", help="Minari datasets folder for a Minari id")
    imp.add_argument("--overwrite", action="store_true", help="replace the vcollect dataset if it exists")
    imp.add_argument("--root", default=None, metavar="DIR", help=root_help)
    imp.set_defaults(handler=run_import_minari)

    delete = commands.add_parser(
        "delete", help="delete datasets", description="Delete datasets (asks first unless --yes)."
    )
    delete.add_argument("dataset_ids", metavar="ID", nargs="+")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument("--root", default=None, metavar="DIR", help=root_help)
    delete.set_defaults(handler=run_delete)

    bench = commands.add_parser(
        "bench", help="steps/s of the raw gymnasium loop and of the Collector on each backend",
        description="Steps/s with random actions: the raw gymnasium SyncVectorEnv loop (row 'raw') and the "
        "Collector on each backend, with the ratio to the raw loop.",
    )
    bench.add_argument("env_id", metavar="ENV_ID", help="a registered gymnasium env id, or module:EnvId")
    bench.add_argument("--num-envs", type=int, default=8, metavar="N", help="number of env copies (default: 8)")
    bench.add_argument(
        "--backends", default="dummy,subproc",
        help=f"comma-separated backends to measure, from: {', '.join(backends)} (default: dummy,subproc)",
    )
    bench.add_argument("--steps", type=int, default=20_000, metavar="N", help="steps per measurement (default: 20000)")
    bench.add_argument("--rounds", type=int, default=1, metavar="R", help="interleaved rounds; each row keeps its best")
    bench.add_argument("--seed", type=int, default=0)
    bench.set_defaults(handler=run_bench)
    return parser


# ---------------------------------------------------------------------------------------------------
# entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and ``python -m vcollect``; returns the exit status."""
    args = build_parser().parse_args(argv)
    console = _console()
    prog = f"vcollect {args.command}"
    try:
        return int(args.handler(args, console))
    except (UsageError, DatasetNotFoundError, DatasetExistsError, InvalidDatasetIdError, SpaceMismatchError) as exc:
        _error(prog, str(exc))
        return EXIT_USAGE
    except VCollectError as exc:
        _error(prog, str(exc), one_line=False)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _error(prog, "interrupted")
        return EXIT_INTERRUPTED


def _console() -> Console:
    """Rich console on stdout; wide when not a terminal, so piped tables are not cut."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=160)


def _error(prog: str, message: str, *, one_line: bool = True) -> None:
    text = " ".join(message.split()) if one_line else message.rstrip()
    print(f"{prog}: error: {text}", file=sys.stderr)


def _cell(value: Any) -> Text:
    """A table cell showing ``value`` literally (no rich markup)."""
    return Text(str(value))


# ---------------------------------------------------------------------------------------------------
# collect: inputs


def _import_from_cwd(module_name: str) -> Any:
    """Import a user module, looking in the current directory too (as ``python -m`` would)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module_name)


def resolve_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[Callable[[], gym.Env], Any]:
    """(zero-argument env factory, EnvSpec) for ``ENV_ID`` or ``module:ENV_ID``; UsageError if unknown.

    The factory keeps the ``module:`` prefix, so worker processes import the module themselves.
    """
    module_name, sep, bare_id = env_id.rpartition(":")
    if sep:
        try:
            _import_from_cwd(module_name)
        except ImportError as exc:
            raise UsageError(f"cannot import module {module_name!r} of env id {env_id!r}: {exc}") from None
    try:
        spec = gym.spec(bare_id)
    except gym.error.Error as exc:
        raise UsageError(f"unknown environment id {bare_id!r}: {exc}") from None
    kwargs = dict(env_kwargs or {})
    if kwargs:  # the stored spec must rebuild the env that was collected from (as gym.make sets env.spec)
        fields = {key: kwargs[key] for key in ("max_episode_steps", "disable_env_checker") if key in kwargs}
        env_args = {key: value for key, value in kwargs.items() if key not in fields}
        spec = dataclasses.replace(spec, kwargs={**spec.kwargs, **env_args}, **fields)
    return functools.partial(gym.make, env_id, **kwargs), spec


class VectorSource(NamedTuple):
    """What ``make_vector`` is given for an ``ENV_ID``: an env id (or envpool task id), or an env factory."""

    env: str | Callable[[], gym.Env]
    env_kwargs: dict[str, Any]


def vector_source(
    env_id: str, backend: str, env_kwargs: Mapping[str, Any] | None = None, *, in_this_process: bool = True
) -> VectorSource:
    """How to hand ``ENV_ID`` to ``make_vector`` so it builds what ``make_vector(id, ...)`` builds in Python.

    A registered id goes as the id (so the gymnasium backend uses the env's vector entry point). A
    ``module:ENV_ID`` goes as the bare id where the env is built in this process by a backend that takes
    ids (``resolve_env`` imported the module here), else as a factory calling ``gym.make("module:ENV_ID")``,
    so worker processes import the module themselves. Envpool always takes the bare id (its own task id).
    """
    from vcollect.envs.factory import FROM_ENV_ID

    kwargs = dict(env_kwargs or {})
    _, sep, bare_id = env_id.rpartition(":")
    if not sep or backend == "envpool" or (in_this_process and backend in FROM_ENV_ID):
        return VectorSource(bare_id, kwargs)
    return VectorSource(functools.partial(gym.make, env_id), kwargs)


def make_envs(env_id: str, num_envs: int, backend: str, env_kwargs: Mapping[str, Any] | None = None) -> VectorEnv:
    """The vector env ``vcollect collect ENV_ID --backend B --num-envs N`` collects from: built by
    ``make_vector`` from ``vector_source``, as Python's ``make_vector(ENV_ID, N, backend=B)`` builds it."""
    from vcollect.envs import make_vector

    resolve_env(env_id, env_kwargs)  # imports the module of a module:ENV_ID; UsageError for an unknown id
    source = vector_source(env_id, backend, env_kwargs)
    return make_vector(source.env, num_envs, backend=backend, env_kwargs=source.env_kwargs)


def load_policy_factory(spec: str) -> Callable[[gym.Space, gym.Space], Any]:
    """Import ``module:callable``, a factory called as ``factory(observation_space, action_space)``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--policy must be 'random' or 'module:callable', got {spec!r}")
    try:
        module = _import_from_cwd(module_name)
    except Exception as exc:  # ImportError, or the module raising while it is imported
        raise UsageError(f"cannot import policy module {module_name!r}: {type(exc).__name__}: {exc}") from None
    factory = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise UsageError(f"module {module_name!r} has no callable {attr!r} (from --policy {spec!r})")
    return factory  # type: ignore[no-any-return]


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
    if (args.steps is None) == (args.episodes is None):
        raise UsageError("pass exactly one of --steps N or --episodes N")
    for name, value in (("--steps", args.steps), ("--episodes", args.episodes)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be a positive integer, got {value}")
    return args.steps, args.episodes


def _json_option(text: str | None, name: str) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{name} must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{name} must be a JSON object, got {text!r}")
    return value


# ---------------------------------------------------------------------------------------------------
# collect: Ctrl-C and recording


class InterruptGuard:
    """Ctrl-C handling for ``collect``: SIGINT raises KeyboardInterrupt, but never inside a store write.

    Inside :meth:`critical` a SIGINT is held back and raised when the section ends, so an episode is
    buffered whole or not at all and a shard commit is never cut. After :meth:`saving` further SIGINTs
    are ignored, so the final commit of the finished episodes completes.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self._depth = 0
        self._pending = False
        self._saving = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True
        if self._saving:
            return
        if self._depth:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A section a SIGINT must not cut; a SIGINT received inside is raised when it ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and self._pending and not self._saving:
            self._pending = False
            raise KeyboardInterrupt

    def saving(self) -> None:
        """From now on ignore SIGINT (the finished episodes are being committed)."""
        self._saving = True


class GuardedSink:
    """The EpisodeSink ``collect`` writes to: an EpisodeStore whose every write and commit runs inside the
    InterruptGuard's critical section. It forwards the whole EpisodeSink protocol (not just part of it), so
    the collector keeps handing it episodes in batches, as it would the store itself."""

    def __init__(self, store: EpisodeStore, guard: InterruptGuard) -> None:
        self.store = store
        self.guard = guard
        self.observation_space = store.observation_space
        self.action_space = store.action_space

    def write_episodes(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        lengths: Sequence[int] | np.ndarray,
        *,
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None] | None = None,
        infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Buffer several finished episodes in the store; a Ctrl-C never cuts the batch in half."""
        # infos only when given: a store without an infos parameter still takes every other batch
        extra: dict[str, Any] = {} if infos is None else {"infos": infos}
        with self.guard.critical():
            self.store.write_episodes(
                observations, actions, rewards, terminations, truncations, lengths,
                seeds=seeds, env_ids=env_ids, options=options, **extra,
            )

    def write_episode(self, observations: Any, actions: Any, rewards: Any, terminations: Any, truncations: Any,
                      **kwargs: Any) -> None:
        """Buffer one finished episode in the store (the collector's route for recorded infos), whole."""
        with self.guard.critical():
            self.store.write_episode(observations, actions, rewards, terminations, truncations, **kwargs)

    def flush(self) -> None:
        """Commit the pending episodes as a shard; a Ctrl-C never cuts the commit."""
        with self.guard.critical():
            self.store.flush()

    def close(self) -> None:
        """Commit what is left and close the store; a Ctrl-C never cuts the commit."""
        with self.guard.critical():
            self.store.close()


# ---------------------------------------------------------------------------------------------------
# collect


def run_collect(args: argparse.Namespace, console: Console) -> int:
    """``vcollect collect``: collect exactly --steps or --episodes, optionally into a dataset."""
    from vcollect.store import EpisodeStore, dataset_path, parse_dataset_id
    from vcollect.store.writer import DATASET_FILE

    n_step, n_episode = _count(args)
    if args.num_envs < 1:
        raise UsageError(f"--num-envs must be a positive integer, got {args.num_envs}")
    if args.shard_steps < 1:
        raise UsageError(f"--shard-steps must be a positive integer, got {args.shard_steps}")
    env_kwargs = _json_option(args.env_kwargs, "--env-kwargs")
    env_factory, env_spec = resolve_env(args.env_id, env_kwargs)
    if args.dataset is not None:
        parse_dataset_id(args.dataset)
        exists = (dataset_path(args.dataset, args.root) / DATASET_FILE).is_file()
        if exists and not (args.overwrite or args.append):
            raise UsageError(f"dataset {args.dataset!r} exists; pass --append to add to it or --overwrite to replace it")
        if args.append and not exists:
            raise UsageError(f"--append: no dataset {args.dataset!r} under {str(dataset_path(args.dataset, args.root))!r}")
    elif args.append or args.overwrite or args.record_infos:
        raise UsageError("--append, --overwrite and --record-infos need --dataset ID")
    policy_factory = None if args.policy == "random" else load_policy_factory(args.policy)
    if args.ray_workers is not None:
        return run_collect_distributed(args, console, env_factory, env_spec, env_kwargs, policy_factory, n_step, n_episode)
    collector_class = _collector_class(args.use_async)

    guard = InterruptGuard()
    store: Any = None
    before = 0
    try:
        with guard, contextlib.ExitStack() as cleanup:
            try:
                envs = make_envs(args.env_id, args.num_envs, args.backend, env_kwargs)
            except (ImportError, ValueError, TypeError, gym.error.Error) as exc:
                # a missing extra or env dependency, an id the backend lacks, --env-kwargs the env refuses
                raise UsageError(f"cannot make {args.env_id} on backend {args.backend!r}: {exc}") from None
            cleanup.callback(envs.close)
            policy = None
            if policy_factory is not None:
                try:
                    policy = policy_factory(envs.single_observation_space, envs.single_action_space)
                except Exception as exc:
                    raise UsageError(f"policy factory {args.policy!r} raised {type(exc).__name__}: {exc}") from None
                if not callable(policy):
                    raise UsageError(f"policy factory {args.policy!r} returned {type(policy).__name__}, not a policy")
            if args.record_infos and (getattr(envs, "steps_all_envs", False) or getattr(envs, "autoresets", False)):
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
            collector = collector_class(
                policy, envs, store=sink, seed=args.seed, record_infos=args.record_infos,
                seed_every_reset=not args.seed_first_reset_only,
            )
            try:
                stats = collector.collect(
                    n_step=n_step,
                    n_episode=n_episode,
                    random=policy is None,
                    reset_before_collect=True,
                    progress=not args.no_progress,
                )
            finally:
                guard.saving()
                collector.close()
    except BaseException as exc:
        # A VCollectError after a SIGINT: e.g. the env workers got the terminal's Ctrl-C first and died.
        interrupted = isinstance(exc, KeyboardInterrupt) or (isinstance(exc, VCollectError) and guard.interrupted)
        removed = _remove_if_empty(args, store)
        if interrupted:
            _report_interrupt(args, store, removed)
            return EXIT_INTERRUPTED
        raise
    collector_name = "AsyncCollector" if args.use_async else "Collector"
    console.print(stats_table(stats, args.env_id, f"{args.num_envs} x {args.backend}, {collector_name}"))
    if store is not None:
        note = " (the unfinished episodes of a --steps run are not stored)" if n_step is not None else ""
        surplus = store.committed_episodes - stats.n_collected_episodes
        if surplus > 0:
            note += f" (including {surplus} episodes the backend finished beyond the count, in its last vector step)"
        console.print(
            Text(
                f"dataset {args.dataset}: wrote {store.committed_episodes:,} episodes ({store.committed_steps:,} steps) "
                f"(shards committed: {len(store.shards_written) - before}) to {store.path}{note}"
            )
        )
    return EXIT_OK


def run_collect_distributed(
    args: argparse.Namespace,
    console: Console,
    env_factory: Callable[[], gym.Env],
    env_spec: Any,
    env_kwargs: Mapping[str, Any],
    policy_factory: Callable[..., Any] | None,
    n_step: int | None,
    n_episode: int | None,
) -> int:
    """``vcollect collect --ray-workers N``: one Collector per Ray worker, all appending to one dataset."""
    from vcollect.store import EpisodeStore

    if args.ray_workers < 1:
        raise UsageError(f"--ray-workers must be a positive integer, got {args.ray_workers}")
    if args.record_infos:
        raise UsageError("--record-infos is not supported with --ray-workers")
    try:
        from vcollect.distributed import DistributedCollector
        from vcollect.envs.ray_env import require_ray

        require_ray()
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if args.dataset is not None and not args.append:
        env = env_factory()
        try:
            _open_store(args, _Spaces(env.observation_space, env.action_space), env_spec, EpisodeStore).close()
        finally:
            env.close()
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
        store_kwargs={"shard_steps": args.shard_steps},
    )
    try:
        stats = collector.collect(n_step=n_step, n_episode=n_episode, random=policy_factory is None)
    finally:
        collector.close()
    where = f"{args.ray_workers} Ray workers x {args.num_envs} x {args.backend}"
    console.print(stats_table(stats, args.env_id, where))
    if args.dataset is not None:
        console.print(Text(f"dataset {args.dataset}: appended {stats.n_collected_episodes:,} episodes"))
    return EXIT_OK


@dataclasses.dataclass(frozen=True)
class _Spaces:
    """The two spaces _open_store reads, for when no vector env exists on the driver."""

    single_observation_space: gym.Space[Any]
    single_action_space: gym.Space[Any]


def _open_store(args: argparse.Namespace, envs: Any, env_spec: Any, store_class: Any) -> Any:
    if args.append:
        return store_class.open(
            args.dataset, args.root,
            observation_space=envs.single_observation_space,
            action_space=envs.single_action_space,
            shard_steps=args.shard_steps,
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
            "collector": "async" if args.use_async else "sync",
        },
    }
    if args.author is not None:
        metadata["author"] = args.author
    if args.description is not None:
        metadata["description"] = args.description
    try:
        spec_json: Any = env_spec.to_json()
    except (TypeError, ValueError):
        spec_json = None  # an env spec with unserializable kwargs: store the dataset without it
    return store_class.create(
        args.dataset,
        envs.single_observation_space,
        envs.single_action_space,
        env_spec=spec_json,
        root=args.root,
        metadata=metadata,
        shard_steps=args.shard_steps,
        overwrite=args.overwrite,
    )


def _remove_if_empty(args: argparse.Namespace, store: Any) -> bool:
    """After a failed or interrupted run, delete the dataset this run created if it holds no episode."""
    if store is None or args.append or store.committed_episodes:
        return False
    from vcollect.store import delete_dataset

    with contextlib.suppress(DatasetError, OSError):
        delete_dataset(args.dataset, args.root)
        return True
    return False


def _report_interrupt(args: argparse.Namespace, store: Any, removed: bool) -> None:
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


def stats_table(stats: CollectStats, env: str = "", envs: str = "") -> Table:
    """A rich table of one CollectStats: counts, speed, and return/length mean/std/min/max."""
    table = Table(title="CollectStats")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    rows: list[tuple[str, str]] = [(name, value) for name, value in (("env", env), ("envs", envs)) if value]
    rows += [
        ("steps", f"{stats.n_collected_steps:,}"),
        ("episodes", f"{stats.n_collected_episodes:,}"),
        ("time (s)", f"{stats.collect_time:.3f}"),
        ("steps/s", f"{stats.collect_speed:,.0f}"),
    ]
    for name, summary in (("return", stats.returns_stat), ("length", stats.lens_stat)):
        rows += _summary_rows(name, summary)
    for name, value in rows:
        table.add_row(name, _cell(value))
    return table


def _summary_rows(name: str, summary: SummaryStats | None) -> list[tuple[str, str]]:
    if summary is None:
        return [(f"{name} {what}", "-") for what in ("mean", "std", "min", "max")]
    return [
        (f"{name} mean", f"{summary.mean:.2f}"),
        (f"{name} std", f"{summary.std:.2f}"),
        (f"{name} min", f"{summary.min:g}"),
        (f"{name} max", f"{summary.max:g}"),
    ]


# ---------------------------------------------------------------------------------------------------
# list, show, delete


def human_size(n_bytes: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def run_list(args: argparse.Namespace, console: Console) -> int:
    """``vcollect list``: a table of the datasets under the root."""
    from vcollect.store import list_datasets, resolve_root

    datasets = list_datasets(args.root)
    root = resolve_root(args.root)
    if not datasets:
        console.print(Text(f"no datasets under {root}"))
        return EXIT_OK
    table = Table(title=f"datasets under {root}")
    for column in ("id", "episodes", "steps", "size", "author", "created"):
        table.add_column(column, justify="right" if column in ("episodes", "steps", "size") else "left")
    notes: list[str] = []
    for dataset_id, info in datasets.items():
        author = info.get("author")
        table.add_row(
            _cell(dataset_id),
            f"{info.get('total_episodes', 0):,}",
            f"{info.get('total_steps', 0):,}",
            human_size(int(info.get("size_bytes", 0))),
            _cell(", ".join(map(str, author)) if isinstance(author, list) else (author or "-")),
            _cell(str(info.get("created_at") or "-")[:19].replace("T", " ")),
        )
        if info.get("corrupt_shards"):
            notes.append(f"{dataset_id}: {len(info['corrupt_shards'])} unreadable shards left out of the counts")
        if info.get("temporary_files"):
            notes.append(f"{dataset_id}: {len(info['temporary_files'])} half-written .tmp files (from a crash)")
    console.print(table)
    for note in notes:
        console.print(Text(f"note: {note}"))
    return EXIT_OK


def run_show(args: argparse.Namespace, console: Console) -> int:
    """``vcollect show ID``: metadata, spaces, counts, return/length statistics (and --plot)."""
    from vcollect.store import load_dataset

    dataset = load_dataset(args.dataset_id, root=args.root)
    if args.plot is not None:
        if dataset.total_episodes == 0:
            raise UsageError(f"dataset {args.dataset_id!r} has no episodes to plot")
        _require_matplotlib()
    table = Table(title=f"dataset {args.dataset_id}", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    size = sum(p.stat().st_size for p in dataset.shard_paths)
    rows: list[tuple[str, str]] = [
        ("path", str(dataset.path)),
        ("episodes", f"{dataset.total_episodes:,}"),
        ("steps", f"{dataset.total_steps:,}"),
        ("shards", f"{len(dataset.shard_paths):,} ({human_size(size)})"),
        ("observation space", str(dataset.observation_space)),
        ("action space", str(dataset.action_space)),
        ("env spec", dataset.env_spec.id if dataset.env_spec is not None else "-"),
    ]
    for key, value in dataset.metadata.items():
        if key in ("dataset_id",) or value is None:
            continue
        rows.append((key, value if isinstance(value, str) else json.dumps(value)))
    returns = SummaryStats.from_sequence(dataset.episode_returns)
    lengths = SummaryStats.from_sequence(dataset.episode_lengths)
    rows += _summary_rows("return", returns) + _summary_rows("length", lengths)
    for name, value in rows:
        table.add_row(_cell(name), _cell(value))
    console.print(table)
    if args.plot is not None:
        plot_dataset(dataset, args.plot)
        console.print(Text(f"figure written to {args.plot}"))
    return EXIT_OK


def _require_matplotlib() -> None:
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed: pip install 'vcollect[plot]' (or matplotlib)"
        ) from None


def plot_dataset(dataset: Any, path: str | os.PathLike[str]) -> Any:
    """Write a figure of ``dataset``: return histogram, length histogram, return per episode; returns it."""
    from matplotlib.figure import Figure

    returns = np.asarray(dataset.episode_returns, dtype=np.float64)
    lengths = np.asarray(dataset.episode_lengths)
    bins = int(min(50, max(1, len(returns))))
    figure = Figure(figsize=(13, 3.8), layout="constrained")
    ax_return, ax_length, ax_episode = figure.subplots(1, 3)
    ax_return.hist(returns, bins=bins, color="tab:blue")
    ax_return.set(title="return histogram", xlabel="return", ylabel="episodes")
    ax_length.hist(lengths, bins=bins, color="tab:orange")
    ax_length.set(title="length histogram", xlabel="steps", ylabel="episodes")
    ax_episode.plot(np.arange(len(returns)), returns, color="tab:blue", linewidth=0.8)
    ax_episode.set(title="return per episode", xlabel="episode", ylabel="return")
    figure.suptitle(f"{dataset.id}: {len(returns):,} episodes, {int(lengths.sum()):,} steps")
    figure.savefig(path, dpi=100)
    return figure


def run_delete(args: argparse.Namespace, console: Console) -> int:
    """``vcollect delete ID...``: remove datasets (asks first unless --yes)."""
    from vcollect.store import delete_dataset, load_dataset

    for dataset_id in args.dataset_ids:
        load_dataset(dataset_id, root=args.root)  # unknown ids fail before anything is deleted
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("refusing to delete without confirmation: pass --yes")
        answer = input(f"delete {', '.join(args.dataset_ids)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            console.print("nothing deleted")
            return EXIT_FAILURE
    for dataset_id in args.dataset_ids:
        delete_dataset(dataset_id, root=args.root)
        console.print(Text(f"deleted {dataset_id}"))
    return EXIT_OK


# ---------------------------------------------------------------------------------------------------
# combine, split, export, import


def _check_new(dataset_ids: Sequence[str], root: str | None) -> None:
    """UsageError unless every id is well formed, distinct and not taken yet."""
    from vcollect.store import dataset_path, parse_dataset_id
    from vcollect.store.writer import DATASET_FILE

    if len(set(dataset_ids)) != len(dataset_ids):
        raise UsageError(f"the new dataset ids must be distinct, got {list(dataset_ids)}")
    for dataset_id in dataset_ids:
        parse_dataset_id(dataset_id)
        if (dataset_path(dataset_id, root) / DATASET_FILE).is_file():
            raise UsageError(f"dataset {dataset_id!r} already exists; delete it first or pick another id")


def run_combine(args: argparse.Namespace, console: Console) -> int:
    """``vcollect combine ID... --into NEW_ID``: copy the episodes of several datasets into a new one."""
    from vcollect.store import combine_datasets, load_dataset

    sources = [load_dataset(dataset_id, args.root) for dataset_id in args.dataset_ids]
    _check_new([args.into], args.root)
    combined = combine_datasets(sources, args.into, args.root)
    console.print(
        Text(
            f"combined {len(sources)} datasets into {args.into}: {combined.total_episodes:,} episodes, "
            f"{combined.total_steps:,} steps"
        )
    )
    return EXIT_OK


def parse_sizes(text: str, total: int) -> list[int]:
    """``--sizes`` -> episode counts: '800,200' as counts, '80%,20%' as shares of ``total`` episodes.

    Percentages are rounded by largest remainder, so '50%,50%' of 7 episodes gives 4 and 3.
    """
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise UsageError(f"--sizes must list episode counts or percentages, got {text!r}")
    percent = [part.endswith("%") for part in parts]
    if any(percent) and not all(percent):
        raise UsageError(f"--sizes mixes counts and percentages: {text!r}")
    try:
        values = [float(part.rstrip("%")) if all(percent) else int(part) for part in parts]
    except ValueError:
        raise UsageError(f"--sizes must list whole episode counts or percentages like 80%, got {text!r}") from None
    if any(v < 0 for v in values):
        raise UsageError(f"--sizes must not be negative, got {text!r}")
    if not all(percent):
        counts = [int(v) for v in values]
    else:
        if sum(values) > 100 + 1e-9:
            raise UsageError(f"--sizes percentages add up to {sum(values):g}%, more than 100%")
        exact = np.asarray(values) * total / 100.0
        counts_array = np.floor(exact).astype(np.int64)
        target = int(round(float(exact.sum())))
        order = np.argsort(-(exact - counts_array), kind="stable")
        counts_array[order[: max(0, target - int(counts_array.sum()))]] += 1
        counts = counts_array.tolist()
    if sum(counts) > total:
        raise UsageError(f"--sizes {text} add up to {sum(counts)} episodes, more than the {total} the dataset has")
    return counts


def run_split(args: argparse.Namespace, console: Console) -> int:
    """``vcollect split ID --sizes 80,20 --into A B``: shuffle and copy disjoint parts into new datasets."""
    from vcollect.store import EpisodeStore, combine_datasets, delete_dataset, load_dataset, split_dataset

    source = load_dataset(args.dataset_id, args.root)
    sizes = parse_sizes(args.sizes, source.total_episodes)
    if len(sizes) != len(args.into):
        raise UsageError(f"--sizes has {len(sizes)} parts but --into names {len(args.into)} datasets")
    _check_new(args.into, args.root)
    views = split_dataset(source, sizes, seed=args.seed)
    inherited = {k: v for k, v in source.metadata.items() if k not in ("dataset_id", "created_at", "format_version")}
    made: list[str] = []
    try:
        for new_id, view in zip(args.into, views):
            made.append(new_id)
            part = combine_datasets([view], new_id, args.root)
            with EpisodeStore.open(new_id, args.root) as store:
                store.update_metadata({**inherited, "split_from": source.id, "split_sizes": sizes, "split_seed": args.seed})
            console.print(Text(f"{new_id}: {part.total_episodes:,} episodes, {part.total_steps:,} steps"))
    except BaseException:
        for new_id in made:  # all or nothing
            with contextlib.suppress(DatasetError):
                delete_dataset(new_id, args.root)
        raise
    return EXIT_OK


def run_export(args: argparse.Namespace, console: Console) -> int:
    """``vcollect export ID --format minari``: write the dataset in Minari's format."""
    from vcollect.store import export_minari, load_dataset

    dataset = load_dataset(args.dataset_id, args.root)
    minari_id = args.minari_id or args.dataset_id
    path = export_minari(dataset, minari_id, args.minari_root, overwrite=args.overwrite)
    console.print(
        Text(f"exported {dataset.total_episodes:,} episodes of {args.dataset_id} as Minari dataset {minari_id} at {path}")
    )
    return EXIT_OK


def run_import_minari(args: argparse.Namespace, console: Console) -> int:
    """``vcollect import-minari PATH_OR_ID --into ID``: copy a Minari dataset into a new vcollect dataset."""
    from vcollect.store import import_minari, parse_dataset_id

    parse_dataset_id(args.into)
    if not args.overwrite:
        _check_new([args.into], args.root)
    dataset = import_minari(args.source, args.into, args.root, overwrite=args.overwrite, minari_root=args.minari_root)
    console.print(
        Text(f"imported {dataset.total_episodes:,} episodes ({dataset.total_steps:,} steps) into {args.into} at {dataset.path}")
    )
    return EXIT_OK


# ---------------------------------------------------------------------------------------------------
# bench


def raw_loop_speed(env_factory: Callable[[], gym.Env], num_envs: int, steps: int, seed: int) -> float:
    """Steps/s of a plain gymnasium SyncVectorEnv loop (same-step autoreset, batched random actions)."""
    envs = gym.vector.SyncVectorEnv([env_factory] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    try:
        envs.action_space.seed(seed)
        envs.reset(seed=seed)
        batches = max(1, steps // num_envs)
        for _ in range(min(batches, 10)):  # warm-up
            envs.step(envs.action_space.sample())
        start = time.perf_counter()
        for _ in range(batches):
            envs.step(envs.action_space.sample())
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    return batches * num_envs / elapsed


def collector_speed(env_id: str, num_envs: int, backend: str, steps: int, seed: int) -> float:
    """Steps/s of ``Collector.collect(n_step=steps, random=True)`` on ``backend``, after a warm-up call."""
    from vcollect.collector import Collector

    envs = make_envs(env_id, num_envs, backend)
    with Collector(None, envs, seed=seed) as collector:
        collector.collect(n_step=min(steps, 1_000), reset_before_collect=True, random=True)
        stats = collector.collect(n_step=steps, random=True)
    return stats.collect_speed


def run_bench(args: argparse.Namespace, console: Console) -> int:
    """``vcollect bench ENV_ID``: the raw gymnasium loop against the Collector on each backend."""
    available = _backends()
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    unknown = [name for name in backends if name not in available]
    if unknown or not backends:
        raise UsageError(f"--backends: unknown {unknown or args.backends!r}; available: {', '.join(available)}")
    for name, value in (("--num-envs", args.num_envs), ("--steps", args.steps), ("--rounds", args.rounds)):
        if value < 1:
            raise UsageError(f"{name} must be a positive integer, got {value}")
    env_factory, _ = resolve_env(args.env_id)
    measures: dict[str, Callable[[], float]] = {
        "raw": lambda: raw_loop_speed(env_factory, args.num_envs, args.steps, args.seed)
    }
    for name in backends:
        measures[name] = functools.partial(collector_speed, args.env_id, args.num_envs, name, args.steps, args.seed)
    best: dict[str, float] = {}
    for _ in range(args.rounds):  # interleaved, so a noisy neighbour slows every row alike
        for name, measure in measures.items():
            try:
                speed = measure()
            except (ImportError, gym.error.Error) as exc:  # a missing extra or env dependency
                raise UsageError(f"cannot run {args.env_id} for the {name!r} row: {exc}") from None
            best[name] = max(best.get(name, 0.0), speed)
    table = Table(
        title=f"{args.env_id}, {args.num_envs} envs, random actions, {args.steps:,} steps (best of {args.rounds})"
    )
    table.add_column("loop")
    table.add_column("steps/s", justify="right")
    table.add_column("x raw", justify="right")
    raw = best["raw"]
    for name, speed in best.items():
        label = name if name == "raw" else f"Collector ({name})"
        table.add_row(_cell(label), f"{speed:,.0f}", f"{speed / raw:.2f}")
    console.print(table)
    return EXIT_OK
