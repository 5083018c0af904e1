"""Local search on a partition: the move/swap core, near lists, polish, the refinement and its windows."""
