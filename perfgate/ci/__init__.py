"""perfgate in GitHub Actions: the session's pointer file, the job summary, PR comment and
annotations. The workflows' `run:` steps call these through `perfgate ci ...`."""
