"""heuristics subpackage."""
