"""The home of a DL4J network: its configuration (file, JSON text, live object), input types and
sidecar, building and initialising it, the probe (what DL4J itself says of its layers), the planner's
graph of it, the memory model of its `fit()`, its updater state, and the plan file its planned
trainer runs. Nothing outside this package parses a configuration or calls DL4J's `fromJson`."""
