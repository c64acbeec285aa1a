"""Analyses: one entry function per analysis, taking a Model and a config dataclass and returning
a result dataclass that serialises to JSON with its provenance."""
