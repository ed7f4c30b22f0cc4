"""The gate suites: `pytest perfgate/suites` (or `perfgate run`) measures, judges and records."""
