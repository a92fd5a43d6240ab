"""AsyncCollector: collect exact counts from envs that do not step in lock-step.

The Collector steps its ready envs together and waits for the slowest one. The AsyncCollector instead
dispatches a step to every env that is ready (``envs.send``), acts again on whichever envs come back
first (``envs.recv``) and resets finished envs asynchronously (``reset_async``), so a slow step or a
slow reset holds up only its own env. Everything else is the Collector's machinery: one ring per env id
(interleaved envs never mix episodes), per-env policy state, the store, and the statistics.

Counts stay exact: every received transition goes into the collector's ledger (vcollect.collecting.ledger), a
call dispatches no more steps than it still needs, waits for every step it dispatched, and reports exactly
``n_step`` transitions, or per env its quota of whole episodes. Transitions beyond that (steps still in flight
after a TimeoutError, or steps a batch-returning backend needed to return its batch) are reported by the next
call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from vcollect.buffers import VectorRingBuffer
from vcollect.collecting.loops import StepLoop, SubsetLoop
from vcollect.collecting.options import CollectorOptions
from vcollect.collecting.step_context import CollectCall, StepContext
from vcollect.collector import Collector
from vcollect.envs import AsyncResetResult, AsyncStepResult
from vcollect.policies import Policy
from vcollect.spaces import allocate, flatten_batch, unflatten_batch
from vcollect.store.sink import EpisodeSink

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AsyncCollector"]

_Received = tuple[AsyncStepResult | None, AsyncResetResult | None]



@runtime_checkable
class ReceivesAny(Protocol):
    """What a backend that declares ``recv_any`` offers: finished steps and resets from one wait."""

    def recv_any(self, timeout: float | None = None) -> _Received:
        """The steps and resets that finished (either may be None), waiting up to timeout for some."""
        ...


@dataclass
class AsyncWaits:
    """How an AsyncCollector waits, shared with its loop (either may be changed between calls).

    Args:
        wait_num: stepping envs to wait for before acting again.
        timeout: seconds to wait for any step or reset (None: no limit).
    """

    wait_num: int
    timeout: float | None


RESET_POLL_S = 0.002
"""While resets and steps are both in flight, how often waiting for steps looks for finished resets."""


class AsyncCollector(Collector):
    """Collect exact numbers of steps or episodes, acting on whichever envs are ready.

    Same API as Collector. ``wait_num``: how many stepping envs to wait for before acting again (default
    1: act as soon as any env is back). ``timeout``: seconds to wait for any step or reset to finish;
    when none does, TimeoutError names the env ids in flight, and nothing is lost (steps in flight and
    steps already received are reported by the next ``collect``; ``timeout`` may be changed in between).
    Backends that step every env at once (``capabilities.steps_all_envs``) are collected as the Collector
    does. Backends that return results in fixed-size batches (EnvPool's async mode,
    ``capabilities.recv_batch_size``) get at least that many envs in flight whenever the collector waits;
    steps added for that are reported by the next call. Backends built to restart failed envs
    (``max_restarts``, ``capabilities.restarts_envs``) are restarted as the Collector does: an env whose
    worker died with its step or reset in flight, or raised in one, has its running episode abandoned
    (``CollectStats.abandoned``) and is reset with the next seed of its stream; counts stay exact.

    Args:
        policy: As Collector's.
        envs: As Collector's.
        buffer: As Collector's.
        store: As Collector's.
        wait_num: Stepping envs to wait for before acting again (None: 1).
        timeout: Seconds to wait for any step or reset to finish (None: no limit).
        **options: The Collector's keyword options.

    Raises:
        ValueError: ``wait_num`` outside 1..num_envs or ``timeout`` not positive, and as Collector's.
        TypeError: As Collector's.
    """

    handles_batched_recv = True

    def __init__(
        self,
        policy: Policy | Callable[..., Any] | None,
        envs: Any,
        buffer: VectorRingBuffer | None = None,
        store: EpisodeSink | None = None,
        *,
        wait_num: int | None = None,
        timeout: float | None = None,
        **options: Unpack[CollectorOptions],
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        self._waits = AsyncWaits(1 if wait_num is None else wait_num, timeout)
        super().__init__(policy, envs, buffer, store, **options)
        if wait_num is not None and not (isinstance(wait_num, int) and 1 <= wait_num <= self.num_envs):
            raise ValueError(f"wait_num must be an int in 1..{self.num_envs} (the number of envs), got {wait_num!r}")

    @property
    def wait_num(self) -> int:
        """How many stepping envs to wait for before acting again."""
        return self._waits.wait_num

    @wait_num.setter
    def wait_num(self, value: int) -> None:
        self._waits.wait_num = value

    @property
    def timeout(self) -> float | None:
        """Seconds to wait for any step or reset to finish (None: no limit); may be changed between calls."""
        return self._waits.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._waits.timeout = value

    def _make_loop(self, stage_blocks: bool) -> StepLoop:
        if self.capabilities.steps_all_envs:
            return super()._make_loop(stage_blocks)
        return AsyncLoop(self.context, self._waits)

    def reset(
        self,
        seed: int | None = None,
        *,
        reset_buffer: bool = True,
        reset_stats: bool = True,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Finish what is in flight (steps are recorded, reported by the next collect), then reset every env
        (and, by default, the buffer and the counters: Collector.reset).

        Args:
            seed: Re-seeds the collector's generator first (None: keep it), as Collector.reset does.
            reset_buffer: Empty the buffer too.
            reset_stats: Zero ``collect_step``, ``collect_episode`` and ``collect_time`` too.
            options: Passed to every env's reset.

        Raises:
            TypeError: ``seed`` is a bool (Tianshou's ``reset(False)``).
            CollectorStateError: The collector is closed.
        """
        self._closing.check_open()
        if isinstance(self._loop, AsyncLoop):
            self._loop.drain()
        super().reset(seed, reset_buffer=reset_buffer, reset_stats=reset_stats, options=options)


class AsyncLoop(SubsetLoop):
    """The AsyncCollector's step loop: dispatch steps to idle envs, record whichever come back first."""

    def __init__(self, context: StepContext, waits: AsyncWaits) -> None:
        super().__init__(context)
        self.waits = waits
        n = context.num_envs
        self._stepping = np.zeros(n, dtype=bool)
        self._resetting = np.zeros(n, dtype=bool)
        self._sent_actions = allocate(context.action_space, (n,))  # the action each stepping env was sent
        self._reset_seed: list[int | None] = [None] * n  # of each reset in flight
        self._reset_options: list[dict[str, Any] | None] = [None] * n
        caps = context.capabilities
        self._batch = caps.recv_batch_size
        self._replacing = context.restarter is not None  # the backend replaces failed envs (restarts_envs)
        self._recv_any: Callable[[float | None], _Received] | None = None
        if caps.recv_any:
            if not isinstance(context.envs, ReceivesAny):
                raise TypeError(f"{type(context.envs).__name__} declares recv_any but has no recv_any method")
            self._recv_any = context.envs.recv_any

    def drain(self) -> None:
        """Receive and record every step and reset in flight."""
        self._sync_flights()
        while self._stepping.any() or self._resetting.any():
            self._fill_batch(self.ctx.actor.policy is None, None)
            self._take(self._receive(), None)

    def collect_steps(self, n_step: int, call: CollectCall) -> int:
        self._sync_flights()
        carry = self.ctx.ledger
        self._restart(np.flatnonzero(self.ctx.needs_reset), call.reset_options)
        while len(carry) < n_step or self._stepping.any():
            budget = n_step - len(carry) - int(np.count_nonzero(self._stepping))
            if budget > 0:
                self._send_steps(self._idle(), budget, call.random)
            self._fill_batch(call.random, call.reset_options)
            finished = self._take(self._receive(), call.render)
            self._restart(finished, call.reset_options)
            call.bar.update(min(len(carry), n_step) - call.bar.n)
        return carry.take_steps(n_step, call.returns, call.lens)

    def collect_episodes(self, quota: np.ndarray, call: CollectCall) -> int:
        self._sync_flights()
        ends = self.ctx.ledger.episode_ends  # updated in place as transitions are recorded
        self._restart(np.flatnonzero(self.ctx.needs_reset & (ends < quota)), call.reset_options)
        while (owing := ends < quota).any() or self._stepping.any():
            ready = np.flatnonzero(owing & self._idle_mask())
            self._send_steps(ready, ready.size, call.random)
            self._fill_batch(call.random, call.reset_options)
            finished = self._take(self._receive(), call.render)
            self._restart(finished[ends[finished] < quota[finished]], call.reset_options)
            call.bar.update(int(np.minimum(ends, quota).sum()) - call.bar.n)
        return self.ctx.ledger.take_episodes(quota, call.returns, call.lens)[0]

    # ------------------------------------------------------------------ dispatching

    def _idle_mask(self) -> np.ndarray:
        return ~(self._stepping | self._resetting | self.ctx.needs_reset)

    def _idle(self) -> np.ndarray:
        return np.flatnonzero(self._idle_mask())

    def _send_steps(self, candidates: np.ndarray, limit: int, random: bool) -> None:
        """Act for (at most ``limit`` of) the candidate env ids and dispatch their steps."""
        if limit <= 0 or candidates.size == 0:
            return
        if candidates.size > limit:
            # rotate which envs go first so that no env id is favoured
            order = np.argsort((candidates - self._next_env) % self.ctx.num_envs, kind="stable")[:limit]
            candidates = np.sort(candidates[order])
            self._next_env = int(candidates[-1] + 1) % self.ctx.num_envs
        actions = self.ctx.actor.actions(candidates, random)
        for store, values in zip(self._sent_actions, flatten_batch(self.ctx.action_space, actions)):
            store[candidates] = values
        self.ctx.envs.send(actions, candidates)
        self._stepping[candidates] = True

    def _restart(self, env_ids: np.ndarray, options: dict[str, Any] | None) -> None:
        """Dispatch resets (each with a seed from the generator) for the env ids not already busy."""
        env_ids = env_ids[~(self._stepping[env_ids] | self._resetting[env_ids])]
        if env_ids.size == 0:
            return
        seeds = self.ctx.reset_seeds.take(env_ids.tolist())
        self.ctx.envs.reset_async(env_ids, seeds, options)
        self._resetting[env_ids] = True
        for env_id, seed in zip(env_ids.tolist(), seeds):
            self._reset_seed[env_id] = seed
            self._reset_options[env_id] = options

    def _fill_batch(self, random: bool, options: dict[str, Any] | None) -> None:
        """For batch-returning backends: put at least one batch in flight, restarting envs that wait for a
        reset first, then stepping idle envs (those transitions are reported by a later call)."""
        short = self._batch - int(np.count_nonzero(self._stepping | self._resetting))
        if self._batch <= 1 or short <= 0:
            return
        waiting = np.flatnonzero(self.ctx.needs_reset & ~(self._stepping | self._resetting))[:short]
        self._restart(waiting, options)
        self._send_steps(self._idle(), short - waiting.size, random)

    def _sync_flights(self) -> None:
        """Forget flights the backend no longer has (e.g. after it raised for a failed env), and take the envs
        it replaced since last asked."""
        flying = np.zeros(self.ctx.num_envs, dtype=bool)
        flying[self.ctx.envs.in_flight] = True
        self._stepping &= flying
        self._resetting &= flying
        if self._replacing:
            self._take_replaced()

    def _take_replaced(self) -> np.ndarray:
        """The env ids the backend replaced since last asked (``restarts_envs``): their steps and resets in
        flight are gone, their running episodes abandoned (StepContext.take_replaced); each waits for a reset."""
        replaced, _ = self.ctx.take_replaced()
        if replaced.size:
            self._stepping[replaced] = False
            self._resetting[replaced] = False
        return replaced

    # ------------------------------------------------------------------ receiving

    def _receive(self) -> _Received:
        """Finished steps and resets: those already done, else wait (up to ``timeout``) for some."""
        if self._recv_any is not None:
            return self._recv_any(self.waits.timeout)
        resets = self._poll_resets()
        if not self._stepping.any():
            if resets is not None:
                return None, resets
            try:
                return None, self.ctx.envs.recv_reset(1, self.waits.timeout)
            except TimeoutError:
                raise self._timeout_error() from None
        if resets is not None:  # act on the restarted envs now; take whatever steps are done too
            try:
                return self.ctx.envs.recv(1, 0), resets
            except TimeoutError:
                return None, resets
        min_ready = min(self.waits.wait_num, int(np.count_nonzero(self._stepping)))
        if not self._resetting.any():
            try:
                return self.ctx.envs.recv(min_ready, self.waits.timeout), None
            except TimeoutError:
                raise self._timeout_error() from None
        # steps and resets in flight: wait for steps in short slices, so that a reset finishing meanwhile
        # is acted on at once (recv waits for steps only)
        timeout = self.waits.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = RESET_POLL_S if deadline is None else min(RESET_POLL_S, max(0.0, deadline - time.monotonic()))
            try:
                return self.ctx.envs.recv(min_ready, wait), self._poll_resets()
            except TimeoutError:
                resets = self._poll_resets()
                if resets is not None:
                    return None, resets
                if deadline is not None and time.monotonic() >= deadline:
                    raise self._timeout_error() from None

    def _poll_resets(self) -> AsyncResetResult | None:
        if not self._resetting.any():
            return None
        try:
            return self.ctx.envs.recv_reset(1, 0)
        except TimeoutError:
            return None

    def _timeout_error(self) -> TimeoutError:
        return TimeoutError(
            f"AsyncCollector: no env finished a step or reset within timeout={self.waits.timeout} s; env ids in "
            f"flight: {self.ctx.envs.in_flight.tolist()}. Nothing is lost: call collect() again to continue"
        )

    def _take(self, received: _Received, render: float | None) -> np.ndarray:
        """Record received steps (into the rings, the store and the ledger) and start the received
        episodes; returns the env ids whose episode just ended, and those the backend replaced meanwhile
        (restarts_envs: their episodes abandoned after the received steps are recorded), each of which
        waits for a reset."""
        steps, resets = received
        if resets is not None and resets[2].size:
            obs, infos, ids = resets
            self._resetting[ids] = False
            self.ctx.actor.remember_infos(ids, infos)  # kept only for a policy that wants infos
            id_list = ids.tolist()
            seeds = [self._reset_seed[i] for i in id_list]
            options = [self._reset_options[i] for i in id_list]
            if all(o is options[0] for o in options):
                self.ctx.start_episodes(ids, obs, seeds, options[0])
            else:  # resets dispatched by calls with other reset options: start each with its own
                space = self.ctx.observation_space
                flat = flatten_batch(space, obs)
                for j in range(len(id_list)):
                    row = unflatten_batch(space, [leaf[j : j + 1] for leaf in flat])
                    self.ctx.start_episodes(ids[j : j + 1], row, seeds[j : j + 1], options[j])
        if steps is None or not steps[5].size:
            finished = self.ctx.all_ids[:0]
        else:
            next_obs, rewards, terminations, truncations, infos, ids = steps
            self._stepping[ids] = False
            if self.ctx.actor.wants_infos:
                self.ctx.actor.remember_infos(ids, infos)
            actions = unflatten_batch(self.ctx.action_space, [store[ids] for store in self._sent_actions])
            if self.ctx.on_step_hook is not None:
                next_obs, rewards = self.ctx.run_step_hook(ids, actions, next_obs, rewards, terminations, truncations)
            ends_r: list[float] = []
            ends_l: list[int] = []
            finished = self.record(ids, actions, next_obs, rewards, terminations, truncations, render, ends_r, ends_l)
            self.ctx.ledger.push(ids, terminations | truncations, ends_r, ends_l)
        if self._replacing:  # one check per wait
            replaced = self._take_replaced()
            if replaced.size:
                return np.union1d(finished, replaced)
        return finished
