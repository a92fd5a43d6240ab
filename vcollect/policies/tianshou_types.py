"""Recognising Tianshou's objects without importing Tianshou.

``isinstance`` against Tianshou's own classes, looked up in ``sys.modules``: an object can only be an
instance of a Tianshou class once Tianshou has been imported, so a program that never imports it pays
nothing, needs no Tianshou installed, and nothing is guessed from attribute names (no hasattr duck typing).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_tianshou_batch", "is_tianshou_net", "is_tianshou_policy", "net_gives_std"]


def _classes(module: str, *names: str) -> tuple[type, ...]:
    """The classes ``names`` of ``module`` if it is imported already, else ()."""
    loaded = sys.modules.get(module)
    if loaded is None:
        return ()
    return tuple(cls for cls in (getattr(loaded, name, None) for name in names) if isinstance(cls, type))


def is_tianshou_policy(obj: Any) -> bool:
    """Whether obj is a Tianshou 2.x ``Policy`` or ``Algorithm`` (tianshou.algorithm.algorithm_base)."""
    classes = _classes("tianshou.algorithm.algorithm_base", "Policy", "Algorithm")
    return bool(classes) and isinstance(obj, classes)


def is_tianshou_net(module: Any) -> bool:
    """Whether module is one of Tianshou's networks whose forward returns ``(output, state)``: an
    ``ActionReprNet`` (Net, Recurrent, the actors) or a ``RecurrentActorProb``."""
    classes = _classes("tianshou.utils.net.common", "ActionReprNet")
    classes += _classes("tianshou.utils.net.continuous", "RecurrentActorProb")
    return bool(classes) and isinstance(module, classes)


def net_gives_std(module: Any) -> bool:
    """Whether module is a Tianshou Gaussian actor, whose output is ``(loc, scale)`` with scale a standard
    deviation (vcollect's TorchPolicy takes ``(mean, log_std)``)."""
    classes = _classes("tianshou.utils.net.common", "AbstractContinuousActorProbabilistic")
    classes += _classes("tianshou.utils.net.continuous", "RecurrentActorProb")
    return bool(classes) and isinstance(module, classes)


def is_tianshou_batch(obj: Any) -> bool:
    """Whether obj is a ``tianshou.data.Batch``."""
    classes = _classes("tianshou.data.batch", "Batch")
    return bool(classes) and isinstance(obj, classes)
