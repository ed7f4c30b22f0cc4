"""A stand-in `gh` for the comment and issue steps: those endpoints over a JSON file.

    gh api [--paginate] repos/OWNER/REPO/issues/N/comments --jq EXPR    list (jq: real jq)
    gh api --method POST repos/OWNER/REPO/issues/N/comments -F body=@FILE | --input FILE
    gh api --method PATCH repos/OWNER/REPO/issues/comments/ID -F body=@FILE

    gh api [--paginate] "repos/OWNER/REPO/issues?state=open&labels=L" --jq EXPR   list issues
    gh api --method POST repos/OWNER/REPO/issues --input FILE [--jq EXPR]   open one
    gh api --method PATCH repos/OWNER/REPO/issues/N --input FILE            edit or close one

    gh api PATH                         any other GET: ``api[PATH]`` of the state file
    gh auth setup-git                   does nothing

``$FAKE_GH_STATE`` holds ``{"comments": [{"id", "issue", "user": {"login"}, "body"}],
"issues": [{"number", "title", "body", "state", "labels": [{"name"}], "user": {"login"}}]}``;
new comments and issues are the workflow token's, ``github-actions[bot]``. `--input FILE`
is the request's JSON body, as gh sends it. Its ``api`` maps a path to
``{"status": CODE, "body": JSON}`` (as the REST API answers it; gh prints the body, and for a
code of 400 or more says ``gh: MESSAGE (HTTP CODE)`` and exits 1). Without ``GH_TOKEN`` it
fails as gh does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
from pathlib import Path

import jq

HERE = Path(__file__).resolve()
BOT = "github-actions[bot]"


def install(
    folder: Path,
    comments: list[dict],  # type: ignore[type-arg]
    api: dict[str, dict] | None = None,  # type: ignore[type-arg]
    issues: list[dict] | None = None,  # type: ignore[type-arg]
) -> dict[str, str]:
    """Write the stand-in into `folder`; return the variables that put it first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "gh.json"
    state.write_text(json.dumps({"comments": comments, "api": api or {}, "issues": issues or []}))
    script = folder / "gh"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "FAKE_GH_STATE": str(state)}


def comments(env: dict[str, str]) -> list[dict]:  # type: ignore[type-arg]
    return json.loads(Path(env["FAKE_GH_STATE"]).read_text())["comments"]


def issues(env: dict[str, str]) -> list[dict]:  # type: ignore[type-arg]
    return json.loads(Path(env["FAKE_GH_STATE"]).read_text())["issues"]


def _body(fields: list[str], given: dict | None = None) -> str:  # type: ignore[type-arg]
    if given is not None:
        return str(given["body"])
    (value,) = [f.split("=", 1)[1] for f in fields if f.startswith("body=")]
    return Path(value[1:]).read_text() if value.startswith("@") else value


def _print(value: object, expression: str | None) -> None:
    results = jq.compile(expression).input_value(value).all() if expression else [value]
    print("\n".join(r if isinstance(r, str) else json.dumps(r) for r in results))


def _issues(args: argparse.Namespace, state: dict, given: dict | None) -> bool:  # type: ignore[type-arg]
    """The issues endpoints; False when the path is none of them."""
    path, _, query = args.path.partition("?")
    listed = re.fullmatch(r"repos/[^/]+/[^/]+/issues", path)
    one = re.fullmatch(r"repos/[^/]+/[^/]+/issues/(\d+)", path)
    if listed and args.method == "GET":
        wanted = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        found = [
            i for i in state["issues"]
            if i["state"] == wanted.get("state", "open")
            and (not wanted.get("labels") or wanted["labels"] in [x["name"] for x in i["labels"]])
        ]  # fmt: skip
        _print(found, args.jq)
        return True
    if listed and args.method == "POST" and given is not None:
        number = max((i["number"] for i in state["issues"]), default=0) + 1
        issue = {
            "number": number,
            "title": given["title"],
            "body": given["body"],
            "state": "open",
            "labels": [{"name": name} for name in given.get("labels", [])],
            "user": {"login": BOT},
        }
        state["issues"].append(issue)
        _print(issue, args.jq)
        return True
    if one and args.method == "PATCH" and given is not None:
        (issue,) = [i for i in state["issues"] if i["number"] == int(one.group(1))]
        issue.update(
            {k: v for k, v in given.items() if k in ("title", "body", "state", "state_reason")}
        )
        _print(issue, args.jq)
        return True
    return False


def main(argv: list[str]) -> int:
    if not os.environ.get("GH_TOKEN"):
        print(
            "gh: To use GitHub CLI in a GitHub Actions workflow, set the GH_TOKEN variable.",
            file=sys.stderr,
        )
        return 4
    parser = argparse.ArgumentParser(prog="gh")
    parser.add_argument("command", choices=["api", "auth"])
    parser.add_argument("path")
    parser.add_argument("--paginate", action="store_true")
    parser.add_argument("--method", default="GET")
    parser.add_argument("--jq")
    parser.add_argument("-F", "--field", action="append", default=[])
    parser.add_argument("--input")
    args = parser.parse_args(argv)
    if args.command == "auth":
        return 0
    state_path = Path(os.environ["FAKE_GH_STATE"])
    state = json.loads(state_path.read_text())
    state.setdefault("issues", [])
    given = json.loads(Path(args.input).read_text()) if args.input else None
    if args.method == "GET" and args.path in state.get("api", {}):
        return _answer(state["api"][args.path])
    if _issues(args, state, given):
        state_path.write_text(json.dumps(state))
        return 0
    listed = re.fullmatch(r"repos/[^/]+/[^/]+/issues/(\d+)/comments", args.path)
    edited = re.fullmatch(r"repos/[^/]+/[^/]+/issues/comments/(\d+)", args.path)
    if args.method == "GET" and listed:
        found = [c for c in state["comments"] if c["issue"] == int(listed.group(1))]
        _print(found, args.jq)
        return 0
    if args.method == "POST" and listed:
        new_id = max((c["id"] for c in state["comments"]), default=0) + 1
        state["comments"].append(
            {
                "id": new_id,
                "issue": int(listed.group(1)),
                "user": {"login": BOT},
                "body": _body(args.field, given),
            }
        )
    elif args.method == "PATCH" and edited:
        (comment,) = [c for c in state["comments"] if c["id"] == int(edited.group(1))]
        comment["body"] = _body(args.field, given)
    else:
        print(f"gh: HTTP 404: Not Found ({args.method} {args.path})", file=sys.stderr)
        return 1
    state_path.write_text(json.dumps(state))
    print("{}")
    return 0


def _answer(response: dict) -> int:  # type: ignore[type-arg]
    body = response["body"]
    print(json.dumps(body, indent=2))  # a terminal-less gh prints the body as it came
    if response["status"] >= 400:
        message = body.get("message", "error") if isinstance(body, dict) else "error"
        print(f"gh: {message} (HTTP {response['status']})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
