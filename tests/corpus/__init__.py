"""The compatibility corpus: recorded states of each connector and the windows (see README.md)."""
