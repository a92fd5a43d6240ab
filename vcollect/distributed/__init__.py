"""Collection on a Ray cluster: the driver (DistributedCollector), its worker actors, their transport and salvage."""

from __future__ import annotations

from vcollect.distributed.driver import (
    COLLECTOR_KINDS,
    TRANSPORTS,
    DistributedCollector,
    derive_seeds,
    replacement_seed,
)

__all__ = ["COLLECTOR_KINDS", "TRANSPORTS", "DistributedCollector", "derive_seeds", "replacement_seed"]
