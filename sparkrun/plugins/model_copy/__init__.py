"""The model copy: copies model directories to hosts' model caches by content hash (source ``model-copy``)."""
