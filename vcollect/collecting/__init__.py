"""The Collector's parts: what vcollect.collector and vcollect.async_collector build and hand to a step loop.

The options both collectors take (options.py) and the parts made from what a user passes (parts.py); the
StepContext a loop is handed (step_context.py) and what it holds: the actor (acting.py, policy_state.py),
the episode writer (episode_writer.py), the ledger of transitions not yet reported (ledger.py), the reset
seed streams (reset_seeds.py); the step loops (loops/) and collect's progress bar (progress.py). Users
import the collectors, not these.
"""
