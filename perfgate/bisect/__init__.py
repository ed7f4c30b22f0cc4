"""`perfgate bisect`: which commit of a range made a scenario slower, found with the gate.

`git` resolves the ends, lists the range and checks commits out in temporary worktrees (the
user's own tree untouched), `search` is the bisection over commits already classified,
`classify` turns the gate's verdicts against the good end into like-good, like-bad or
undecided, `render` writes the steps and the outcome, and `run` measures and records
(perfgate.bisect.run, the orchestration layer).
"""
