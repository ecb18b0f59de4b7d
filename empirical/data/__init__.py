"""Real corpora: local-file loaders and registry-fetched, sha256-pinned data sets."""
