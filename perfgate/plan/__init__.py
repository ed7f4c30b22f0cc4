"""`perfgate plan`: predict a chain's best step count from one profiled speculative run.

`forecast` is the prediction (pure: acceptance depths and phase costs in, figures with
intervals out), `observe` turns the probe's cycle records into its input, `launch` measures
the profiled server (the sweep's measurement, its probe records kept),
`run` drives it over the sweep's runner and confirms the best, `render` writes the table.
"""

DEFAULT_STEPS = 8  # the profiled chain's steps: generous, as steps beyond it are not predicted
DEFAULT_CONFIRM = 2  # the fastest predicted step counts measured after
