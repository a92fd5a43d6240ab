"""Torch's intra-op thread count around a policy call, shared by TorchPolicy and TianshouPolicy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["call_with_threads", "check_num_threads"]


def check_num_threads(num_threads: int | None) -> int | None:
    """A policy's ``num_threads``: a positive int or None (ValueError otherwise)."""
    if num_threads is not None and (
        isinstance(num_threads, bool) or int(num_threads) != num_threads or num_threads < 1
    ):
        raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
    return None if num_threads is None else int(num_threads)


def call_with_threads(threads: int, fn: Callable[[Any, Any], tuple[Any, Any]], obs: Any, state: Any) -> tuple[Any, Any]:
    """``fn(obs, state)`` with torch's intra-op thread count set to ``threads`` (see TorchPolicy), set back
    afterwards even when it raises; nothing is changed when the count already matches."""
    previous = torch.get_num_threads()
    if previous == threads:
        return fn(obs, state)
    torch.set_num_threads(threads)
    try:
        return fn(obs, state)
    finally:
        torch.set_num_threads(previous)
