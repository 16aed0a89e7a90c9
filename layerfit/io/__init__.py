"""Files in and pictures out: YAML and JSON input documents read into domain types
(``documents``), the one rule for opening an input file (``files``), and placement pictures
(``plot``)."""
