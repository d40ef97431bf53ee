"""The benchmark frameworks sparkrun ships."""
