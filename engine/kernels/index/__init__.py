"""Spatial indexes and cuts: median splits, the kd-tree, the bucket index, the partition plan."""
