"""Configuration: the one schema system (callback parameters and alert rules), JSON Schema, and the
YAML checker behind `mftb validate` (with the YAML line of every problem, and its report)."""
