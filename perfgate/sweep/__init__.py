"""`perfgate sweep`: a grid of speculative settings and environments, each point a recorded run.

`grid` lays out the points (perfgate.spec.sweep reads ``[sweeps.NAME]`` tables), `stop` says
when a branch of the grid is clearly worse, `run` measures and records, `render` writes the
table.
"""
