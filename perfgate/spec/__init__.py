"""The declarative schema of perfgate's configuration: what a scenario, a sweep and a serving
load are, and what each of their fields means. Pure: it imports no torch, SQLAlchemy or httpx.

Import from the modules: `perfgate.spec.scenario` (Scenario and SCENARIO_FIELDS),
`perfgate.spec.sweep`, `perfgate.spec.serving`, `perfgate.spec.document` (the file's layout)
and `perfgate.spec.values` (the validators).
"""
