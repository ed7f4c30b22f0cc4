"""A job that launched an embedded server through perfgate and then hung (a cancelled run whose
pytest never got to stop it): prints `ready PORT SUPERVISOR_PID`, then waits forever.

    python abandoned_job.py CONFIG LOG
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from perfgate.config import load_config
from perfgate.engines.launch import free_port, start_server
from perfgate.engines.server_commands import server_command


def main(config: str, log: str) -> None:
    scenario = next(iter(load_config(config).scenarios.values()))
    command = server_command(scenario, "plain", port=free_port())
    # tests/hang.py's HANG_S, which a script run by path cannot import: a guard, not a measure.
    server = start_server(command, Path(log), startup_timeout_s=1800)
    print(f"ready {command.port} {server.process.pid}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main(*sys.argv[1:3])
