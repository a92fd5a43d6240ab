"""Reading datasets: Dataset, its episode index, shard and chunk reading, torch views, verify, replay, transforms."""
