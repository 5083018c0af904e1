"""The MDAV family: on the bucket index, by brute force on slots, leaf by leaf, and which runs a block."""
