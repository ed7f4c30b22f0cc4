#!/usr/bin/env bash
# ACTIONS_RUNNER_HOOK_JOB_COMPLETED for a self-hosted GPU runner (see docs/runner-setup.md).
# Ends the servers the job left behind (a cancelled run, a server started with `&`). It only
# warns: a failing post-job hook would mark a finished job red.
set -euo pipefail
exec "${PERFGATE_HOOK_BIN:-perfgate}" runner job-completed
