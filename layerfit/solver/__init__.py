"""solver subpackage."""
