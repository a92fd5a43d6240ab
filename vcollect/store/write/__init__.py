"""Writing episodes: EpisodeStore, its checks, shards and their commits, compression, frame stacks."""
