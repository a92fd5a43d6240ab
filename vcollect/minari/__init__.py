"""Minari's API and formats: DataCollector, its callbacks, EpisodeBuffer, the HDF5/Arrow codecs, export/import."""
