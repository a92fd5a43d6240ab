"""Reading datasets: Dataset, its episode index, slices, torch views, verify, listing, stored episodes replayed
and rendered; the shard files beneath them in shards/."""
