"""A dataset's place on disk: ids and roots, dataset.json, staging, publish journals, manifests, catalog, namespaces."""
