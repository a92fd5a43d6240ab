"""A dataset's shard files read: which files a read takes (the census), each file's checked episode table, and
its columns' rows decoded (chunk tables, Zstandard stretches) through a bounded set of open files."""
