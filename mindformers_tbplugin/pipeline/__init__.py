"""Step values -> {tag: float} with a kind (data | model | system) -> cross-rank aggregation ->
routing to runs. Plain data only: no file format, no MindSpore."""
