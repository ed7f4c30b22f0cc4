#!/usr/bin/env bash
# Tensor parallelism on two GPUs: the embedded engine's large configuration at TP1 and TP2.
#
#   benchmarks/gpu_tp2.sh OUTDIR [STAGE...]           # CUDA, two GPUs; stages (default: all):
#                                                     #   compare sweep profile endings
#   benchmarks/gpu_tp2.sh --smoke OUTDIR [STAGE...]   # CPU: the tiny models over gloo (~3 min)
#
# Stages, on scenario embedded-large-tp2 of perfgate.toml (TP2) and the same at tp = 1 (TP1,
# named embedded-large-gpu here): seeded weights (--load-format dummy) and simulated acceptance,
# so they measure speed only and need no trained weights. TP_SCENARIO names another scenario
# of perfgate.toml to run in its place, such as embedded-large-tp8 on eight GPUs (its tp labels
# the tables; it needs what that scenario needs: trained weights for embedded-large-tp8, and
# NCCL_PROTOS, default "LL,Simple", can add LL128 to the sweep and the profiles):
#   compare  `perfgate run --no-gate` of each: tok/s, verify ms and cycle ms, plain and EAGLE-3,
#            TP1 against TP2, the per-rank spread of cycle time, and the prompts whose plain
#            (greedy) outputs are token-identical at TP1 and TP2 (compare.md);
#   sweep    `perfgate sweep --scenario embedded-large-tp2 --steps 1-6 --env NCCL_PROTO=LL,Simple
#            --env NCCL_ALGO=Ring,Tree`: the table (sweep.md, sweep.json), then, at each steps
#            value, the environment point of least verify time judged against the one of most
#            by the gate's own statistics over every launch of each point (perfgate.sweep.noise,
#            verify_ms tolerance 3%): did NCCL's settings move verify beyond noise? With
#            SWEEP_LAUNCHES=N (default 1) the sweep runs N times into one history, so that each
#            point has N launches and the spread between launches is in the judgement (with
#            one, the table says that it is not);
#   profile  `perfgate profile` of the TP2 speculative server (rank 0's trace) under its own
#            environment and under each NCCL point: verify ms per cycle, the communication
#            category's share of it, and the longest all-reduce kernels of the trace; eager
#            (--disable-cuda-graph) again where the trace shows no communication kernel
#            (profile.md; the first profile's profile.json);
#   endings  10 abrupt endings of a TP2 `perfgate run` (SIGINT, SIGTERM, SIGKILL in turn, to
#            perfgate alone, during the plain repeats or the speculative server's start): after
#            each, no process of the engine is left and both GPUs' memory is back within
#            MEM_SLACK_MIB (256) of what it was before (nvidia-smi); then one whole TP2 run,
#            which must start on the GPUs the endings left (endings.md).
# Every step's command, exit code and duration go to summary.md, whatever happens: a failed
# step is recorded and the script goes on. run.log holds the whole output. OUTDIR gets at most
# 8 files: summary.md, run.log, compare.md, sweep.md, sweep.json, profile.md, profile.json,
# endings.md. The device tool runs one command for at most 10 minutes: there, run the stages
# in separate calls (`compare profile`, `sweep`, `endings`), each with its own OUTDIR, or
# shorten the sweep with SWEEP_BUDGET_S (default 480 s of launching). Needs perfgate's
# dependencies importable (an existing PYTHONPATH is kept); PYTHON picks the interpreter
# (default python3). NCCL_NVLS_ENABLE stays 0 (the shared hosts require it; perfgate's TP
# servers set it anyway unless told otherwise). Exit code: 0 when every step ended as
# expected, 1 otherwise.
set -u -o pipefail

# shellcheck source=stages.sh source-path=SCRIPTDIR
source "$(dirname "$0")/stages.sh"
# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
record_args 1 "" "[compare] [sweep] [profile] [endings]" "$@"
stages=("${args[@]}")
[[ ${#stages[@]} -eq 0 ]] && stages=(compare sweep profile endings)
check_stages "compare sweep profile endings" "${stages[@]}"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-tp2.XXXXXX")
record_start "$out"
use_checkout
cd "$repo" || exit 1

tp1=embedded-large-gpu
tp2=${TP_SCENARIO:-embedded-large-tp2}
protos=${NCCL_PROTOS:-LL,Simple}
config=$work/perfgate.toml
steps=${SWEEP_STEPS:-1-6}
sweep_repeats=${SWEEP_REPEATS:-3}
sweep_budget=${SWEEP_BUDGET_S:-480}
sweep_launches=${SWEEP_LAUNCHES:-1}
endings=${ENDINGS:-10}
mem_slack=${MEM_SLACK_MIB:-256}
run_limit=540 sweep_limit=$((sweep_budget + 100)) profile_limit=150 ending_wait=240
if [[ $smoke -eq 1 ]]; then
  # The same two scenarios' shape on the CPU: the tiny models, as one and two processes.
  config=$work/perfgate.toml
  for pair in "$tp1 1" "$tp2 2"; do
    read -r name tp <<< "$pair"
    {
      # No warm-up: a smoke reads no figure, and a warm-up is one more generation per server.
      smoke_scenario "$name" | sed 's/^warmup = .*/warmup = 0/'
      cat << EOF
tp = $tp
startup_timeout_s = 90
extra_args = ["--num-threads", "1"]
spec_extra_args = ["--debug-simulate-accept-rate", "0.7"]
equivalence = "report"

EOF
    } >> "$config"
  done
  steps=${SWEEP_STEPS:-1-2} sweep_repeats=${SWEEP_REPEATS:-2} endings=${ENDINGS:-3}
  sweep_budget=${SWEEP_BUDGET_S:-120} sweep_limit=$((sweep_budget + 60))
  run_limit=240 profile_limit=120 ending_wait=120
else
  # TP2 as perfgate.toml has it, and TP1 the same but for tp, written out as a config of two.
  "$python" - "$repo/perfgate.toml" "$tp2" "$tp1" > "$config" <<'EOF' || exit 1
import json, sys, tomllib
source, tp2, tp1 = sys.argv[1:4]
scenario = tomllib.load(open(source, "rb"))["scenarios"][tp2]
def value(v):
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else repr(v)
for name, tp in ((tp1, 1), (tp2, scenario.get("tp", 1))):
    keys = {**scenario, "tp": tp}
    print(f"[scenarios.{name}]")
    print("\n".join(f"{k} = {value(v)}" for k, v in keys.items() if not isinstance(v, dict)))
    for table, entries in ((k, v) for k, v in keys.items() if isinstance(v, dict)):
        print(f"[scenarios.{name}.{table}]")
        print("\n".join(f"{k} = {value(v)}" for k, v in entries.items()))
    print()
EOF
fi
tpn=$("$python" -c "import sys, tomllib; print(tomllib.load(open(sys.argv[1], 'rb'))['scenarios'][sys.argv[2]].get('tp', 1))" "$config" "$tp2") || exit 1
export TP_LABEL="TP$tpn" # names the split in every table and step
db="sqlite:///$work/history.db"
hidden=$work hidden_as=WORK
summary=$out/summary.md
failed=0

{
  echo "# TP1 against TP2 on the embedded engine: $(date -u +%FT%TZ)"
  echo
  echo "Stages: ${stages[*]}; config: ${config/#$repo/.}; scenarios $tp1 (TP1), $tp2 ($TP_LABEL)."
  echo
  echo '```'
  describe_machine
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  echo '```'
  echo
  echo "| step | exit | expected | seconds | command |"
  echo "| --- | ---: | ---: | ---: | --- |"
} > "$summary"

note() { # note TEXT...: a line of the summary's notes, kept for the end
  echo "$*" >> "$work/notes.md"
  echo "note: $*"
}

# --- compare: TP1 against TP2 ------------------------------------------------------------
stage_compare() {
  for s in "$tp1" "$tp2"; do
    step "run $s" 0 "$run_limit" "$python" -m perfgate run --config "$config" --scenario "$s" \
      --no-gate --db "$db" --report ''
  done
  step "compare table" 0 60 "$python" - "$work/history.db" "$tp1" "$tp2" "$out/compare.md" <<'EOF'
import json, os, sqlite3, statistics, sys
db, tp1, tp2, target = sys.argv[1:5]
con = sqlite3.connect(db)
lines = [
    f"# TP1 ({tp1}) against {os.environ['TP_LABEL']} ({tp2})",
    "",
    "Medians over the repeats of one `perfgate run --no-gate` each; phase times are rank 0's.",
    "",
    "| scenario | server | output tok/s | verify ms | cycle ms | accept length | speedup "
    "| per-rank cycle ms (spread) |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
]
for scenario in (tp1, tp2):
    row = con.execute(
        "select id, servers from runs where scenario = ? order by id desc limit 1", (scenario,)
    ).fetchone()
    if row is None:
        lines.append(f"| {scenario} | no run recorded | | | | | | |")
        continue
    run_id, servers = row
    servers = json.loads(servers or "{}")
    for mode in ("plain", "spec"):
        def median(metric):
            values = [v for (v,) in con.execute(
                "select value from samples where run_id = ? and mode = ? and metric = ?",
                (run_id, mode, metric))]
            return f"{statistics.median(values):.3f}" if values else "-"
        spread = (servers.get(mode) or {}).get("engine_metrics") or {}
        ranks = sorted(k for k in spread if k.startswith("rank_cycle_ms.") and k[14:].isdigit())
        per_rank = ", ".join(f"{spread[k]:.3f}" for k in ranks)
        if ranks:
            per_rank += f" ({spread.get('rank_cycle_ms.spread', 0.0):.3f})"
        lines.append(
            f"| {scenario} | {mode} | {median('output_tok_s')} | {median('verify_ms')} "
            f"| {median('cycle_ms')} | {median('accept_length')} | {median('speedup')} "
            f"| {per_rank or '-'} |"
        )
lines += ["", "A plain server has no verify phase: its cycle is one target forward, "
          "what verify is to the speculative server."]
# The plain servers' greedy outputs, TP2 against TP1, prompt by prompt.
def plain_outputs(scenario):
    row = con.execute("select max(id) from runs where scenario = ?", (scenario,)).fetchone()
    return [json.loads(ids) for (ids,) in con.execute(
        "select plain_ids from outputs where run_id = ? order by prompt_index", (row[0],))]
one, two = plain_outputs(tp1), plain_outputs(tp2)
if one and len(one) == len(two):
    parts = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None) for x, y in zip(one, two)]
    same = sum(p is None and len(x) == len(y) for p, x, y in zip(parts, one, two))
    where = ", ".join(f"prompt {k} at token {p}" for k, p in enumerate(parts) if p is not None)
    lines += ["", f"Plain outputs, {os.environ['TP_LABEL']} against TP1: {same}/{len(one)} prompts token-identical"
              + (f"; parted: {where}" if where else "") + "."]
open(target, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
}

# --- sweep: steps x NCCL settings on TP2 ---------------------------------------------------
stage_sweep() {
  # Exit 1 is expected where simulated acceptance makes the speculative outputs differ. Each
  # of SWEEP_LAUNCHES sweeps (same name, same history) adds one launch to every point.
  local launch
  for ((launch = 1; launch <= sweep_launches; launch++)); do
    step "sweep (launch $launch of $sweep_launches)" "0|1" "$sweep_limit" "$python" -m perfgate sweep \
      --config "$config" --scenario "$tp2" --name "${TP_LABEL,,}-nccl" --steps "$steps" \
      --env "NCCL_PROTO=$protos" --env NCCL_ALGO=Ring,Tree --repeats "$sweep_repeats" \
      --budget-s "$sweep_budget" --db "$db" --profile "${TP_LABEL,,}" \
      --json "$out/sweep.json" --markdown "$out/sweep.md"
  done
  step "sweep: did NCCL settings move verify" 0 60 "$python" - "$work/history.db" \
    "$out/sweep.json" "$work/sweep-noise.md" <<'EOF'
import json, sqlite3, sys
from perfgate.metrics import Direction
from perfgate.sweep.noise import compare_points
db, sweep_json, target = sys.argv[1:4]
TOLERANCE = 0.03  # the scenario's verify_ms tolerance
con = sqlite3.connect(db)
points = [p for p in json.load(open(sweep_json))["points"] if p.get("run") and p.get("verify_ms")]
lines = ["| steps | least verify (env) | ms | most verify (env) | ms | change | gate says |",
         "| ---: | --- | ---: | --- | ---: | ---: | --- |"]
env_name = lambda p: " ".join(f"{k}={v}" for k, v in sorted(p["env"].items())) or "-"
def launches(p):
    """Every recorded launch of the point (its sweep label and setting, on its profile):
    each launch's verify_ms repeats."""
    (profile,) = con.execute("select profile from runs where id = ?", (p["run"],)).fetchone()
    runs = [r for (r,) in con.execute(
        "select id from runs where profile = ? and json_extract(config, '$.sweep') = ? "
        "and json_extract(config, '$.steps') = ? and json_extract(config, '$.topk') = ? "
        "and json_extract(config, '$.draft_tokens') = ? order by id",
        (profile, p["sweep"], p["steps"], p["topk"], p["draft_tokens"]))]
    return [[v for (v,) in con.execute(
        "select value from samples where run_id = ? and mode = 'spec' and metric = 'verify_ms' "
        "order by repeat", (run,))] for run in runs]
for steps in sorted({p["steps"] for p in points}):
    at = sorted((p for p in points if p["steps"] == steps), key=lambda p: p["verify_ms"])
    if len(at) < 2:
        continue
    fast, slow = at[0], at[-1]
    judged = compare_points(launches(slow), launches(fast), Direction.LOWER_IS_BETTER, TOLERANCE)
    change = fast["verify_ms"] / slow["verify_ms"] - 1
    lines.append(f"| {steps} | {env_name(fast)} | {fast['verify_ms']:.3f} | {env_name(slow)} "
                 f"| {slow['verify_ms']:.3f} | {change:+.1%} | {judged.says()} |")
text = ("At each steps value, the environment point of least verify time judged against the "
        "point of most, by the gate's statistics over every launch of each point "
        "(perfgate.sweep.noise; one-sided 5%, verify_ms tolerance 3%).\n\n"
        + "\n".join(lines) + "\n")
open(target, "w").write(text)
print(text)
EOF
  if [[ -s "$work/sweep-noise.md" ]]; then
    { echo; echo "## Did NCCL settings move verify?"; echo; cat "$work/sweep-noise.md"; } \
      >> "$work/notes.md"
  fi
}

# --- profile: the communication share of verify --------------------------------------------
verify_communicates() { # verify_communicates PROFILE_JSON: its verify has communication work
  "$python" - "$1" <<'EOF' 2> /dev/null
import json, sys
verify = json.load(open(sys.argv[1]))["phases"].get("verify", {})
sys.exit(0 if (verify.get("ms_per_cycle") or {}).get("communication", 0.0) > 0 else 1)
EOF
}

profile_once() { # profile_once LABEL [VAR=VALUE...]: profile the TP2 spec server
  local label=$1
  shift
  local dir=$work/profile-$label
  step "profile $label" 0 "$profile_limit" env "$@" "$python" -m perfgate profile \
    --config "$config" --scenario "$tp2" --mode spec --cycles 3 --repeats 1 --out "$dir"
  if [[ $smoke -eq 0 ]] && ! verify_communicates "$dir/profile.json"; then
    note "profile $label: no communication kernel in the trace (graph replays?); profiled eagerly"
    rm -rf "$dir"
    step "profile $label, eager" 0 "$profile_limit" env "$@" "$python" -m perfgate profile \
      --config "$config" --scenario "$tp2" --mode spec --cycles 3 --repeats 1 --out "$dir" \
      --disable-cuda-graph
  fi
}

stage_profile() {
  profile_once default
  cp "$work/profile-default/profile.json" "$out/profile.json" 2> /dev/null
  local labels=(default)
  for proto in ${protos//,/ }; do
    for algo in Ring Tree; do
      profile_once "$proto-$algo" "NCCL_PROTO=$proto" "NCCL_ALGO=$algo"
      labels+=("$proto-$algo")
    done
  done
  step "profile table" 0 60 "$python" - "$work" "$out/profile.md" "${labels[@]}" <<'EOF'
import collections, gzip, json, os, pathlib, re, sys
work, target, labels = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
COMM = re.compile(r"nccl|all_?reduce", re.I)
lines = [f"# Profile of the {os.environ['TP_LABEL']} speculative server (rank 0's trace)", "",
         "| environment | graphs | verify ms per cycle | communication ms | share of verify |",
         "| --- | --- | ---: | ---: | ---: |"]
kernels = []
for label in labels:
    folder = work / f"profile-{label}"
    try:
        report = json.loads((folder / "profile.json").read_text())
    except OSError:
        lines.append(f"| {label} | - | no profile | | |")
        continue
    verify = report["phases"].get("verify", {})
    total = verify.get("total_ms_per_cycle") or 0.0
    comm = (verify.get("ms_per_cycle") or {}).get("communication", 0.0)
    command = report.get("command", "")
    eager = "--disable-cuda-graph" in command or "--device cpu" in command
    share = f"{comm / total:.1%}" if total else "-"
    lines.append(f"| {label} | {'eager' if eager else 'CUDA graphs'} | {total:.3f} | {comm:.3f} | {share} |")
    trace = folder / "trace.json.gz"
    if trace.exists():
        events = json.loads(gzip.decompress(trace.read_bytes())).get("traceEvents", [])
        spans = [e for e in events if e.get("ph") == "X"]
        # GPU kernels; on a CPU server, the CPU operators
        kind = "kernel" if any(str(e.get("cat", "")).lower() == "kernel" for e in spans) else "cpu_op"
        by_name = collections.defaultdict(list)
        for e in spans:
            if str(e.get("cat", "")).lower() == kind and COMM.search(e.get("name", "")):
                by_name[e["name"]].append(float(e.get("dur", 0.0)))
        cycles = report.get("cycles") or 1
        for name, durations in by_name.items():
            kernels.append((sum(durations) / cycles / 1e3, max(durations), len(durations), label, name))
lines += ["", "The longest all-reduce kernels (whole profiled window, all phases):", "",
          "| environment | ms per cycle | longest call us | calls | kernel |",
          "| --- | ---: | ---: | ---: | --- |"]
for ms, longest, calls, label, name in sorted(kernels, reverse=True)[:12]:
    lines.append(f"| {label} | {ms:.3f} | {longest:.1f} | {calls} | `{name[:100]}` |")
if not kernels:
    lines.append("| - | | | | no communication kernel in any trace |")
open(target, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
}

# --- endings: abrupt ends of a TP2 run -------------------------------------------------------
# Every run this stage starts carries ENDINGS_TAG in its environment, and the engine processes
# it starts inherit it: only those are counted, and killed when an ending leaves them, never an
# engine process of anything else on the machine (another job, or a test running beside this).
ENDINGS_TAG="perfgate-endings-$$-$(date +%s%N)"
any_engine_processes() { # the pids of every engine process (servers, ranks, supervisors)
  pgrep -f 'perfgate[.]engines[.](embedded[.]server|embedded[.]rank|supervise)' | tr '\n' ' '
}
engine_processes() { # the pids of this stage's engine processes
  local p
  for p in $(any_engine_processes); do
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qxF "PERFGATE_ENDINGS=$ENDINGS_TAG"; then
      printf '%s ' "$p"
    fi
  done
}

gpu_memory() { # used MiB per GPU, space-separated; empty without nvidia-smi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | tr -d ' ' \
    | tr '\n' ' '
}

memory_back() { # memory_back "BEFORE" "NOW": every GPU within the slack of before
  local -a was is
  local i
  read -r -a was <<< "$1"
  read -r -a is <<< "$2"
  [[ ${#was[@]} -eq ${#is[@]} ]] || return 1
  for i in "${!was[@]}"; do
    ((is[i] <= was[i] + mem_slack)) || return 1
  done
}

one_ending() { # one_ending I SIGNAL WHEN: start a TP2 run, end it, check what is left
  local i=$1 sig=$2 when=$3 log=$work/ending-$1.log line pid started rc
  if [[ $when == plain ]]; then
    line="$tp2 plain: repeat 1 of"
  else
    line="$tp2: starting spec server"
  fi
  # Job control on: the run gets its own process group, as a CI step has, and SIGINT is not
  # ignored (a non-interactive shell's background jobs ignore it otherwise).
  set -m
  PERFGATE_ENDINGS=$ENDINGS_TAG "$python" -m perfgate run --config "$config" --scenario "$tp2" \
    --no-gate --db "$db" --report '' > "$log" 2>&1 &
  pid=$!
  set +m
  started=$(date +%s)
  until grep -q "$line" "$log" 2> /dev/null; do
    if ! kill -0 "$pid" 2> /dev/null || (($(date +%s) - started > ending_wait)); then
      break
    fi
    sleep 0.2
  done
  local seen=yes
  grep -q "$line" "$log" 2> /dev/null || seen=no
  kill -s "$sig" "$pid" 2> /dev/null
  local ended_ns
  ended_ns=$(date +%s%N)
  wait "$pid"
  rc=$?
  local gone_ms=- mem_ms=- left now=""
  for _ in $(seq 1 600); do # 60 s at most
    left=$(engine_processes)
    if [[ -z $left && $gone_ms == - ]]; then
      gone_ms=$((($(date +%s%N) - ended_ns) / 1000000))
    fi
    now=$(gpu_memory)
    if [[ -n $before_mem && $mem_ms == - ]] && memory_back "$before_mem" "$now"; then
      mem_ms=$((($(date +%s%N) - ended_ns) / 1000000))
    fi
    [[ $gone_ms != - && (-z $before_mem || $mem_ms != -) ]] && break
    sleep 0.1
  done
  left=$(engine_processes)
  local ok=yes
  [[ -n $left ]] && ok=no
  [[ -n $before_mem && $mem_ms == - ]] && ok=no
  [[ $seen == no ]] && ok="no (line not seen)"
  echo "| $i | $sig | $when | $rc | ${left:-none} | $gone_ms | ${now:--} | $mem_ms | $ok |" \
    >> "$work/endings.md"
  echo "== ending $i: $sig during $when: exit $rc, left: ${left:-none}, gone after $gone_ms ms," \
    "memory ${now:--} back after $mem_ms ms: $ok"
  if [[ $ok != yes ]]; then
    failed=1
    for p in $left; do # what a failed ending left: end it, so the next one starts clean
      kill -KILL "$p" 2> /dev/null
    done
  fi
  echo "| ending $i ($sig during $when) | $rc | signal | $(($(date +%s) - started)) |" \
    "\`perfgate run --scenario $tp2\`, then kill -$sig: $ok |" >> "$summary"
}

stage_endings() {
  before_mem=$(gpu_memory)
  local left
  left=$(any_engine_processes)
  if [[ -n $left ]]; then
    note "engine processes of something else, running before the endings (left alone): $left"
  fi
  {
    echo "# $endings abrupt endings of a $TP_LABEL \`perfgate run\`"
    echo
    echo "GPU memory used before (MiB per GPU): ${before_mem:-no nvidia-smi}; slack $mem_slack MiB."
    echo "Milliseconds count from the signal. 'left' lists engine processes still there after 60 s."
    echo
    echo "| # | signal | during | exit | left | gone after ms | memory now (MiB) | memory back after ms | whole |"
    echo "| ---: | --- | --- | ---: | --- | ---: | --- | ---: | --- |"
  } > "$work/endings.md"
  local signals=(INT TERM KILL) i
  for i in $(seq 1 "$endings"); do
    local when=plain
    ((i % 2 == 0)) && when="spec start"
    one_ending "$i" "${signals[$(((i - 1) % 3))]}" "$when"
  done
  step "a whole $TP_LABEL run after the endings" 0 "$run_limit" "$python" -m perfgate run \
    --config "$config" --scenario "$tp2" --no-gate --db "$db" --report ''
  cp "$work/endings.md" "$out/endings.md"
}

for stage_name in "${stages[@]}"; do
  echo "== $(date -u +%FT%TZ) stage $stage_name"
  case $stage_name in
    compare) stage_compare ;;
    sweep) stage_sweep ;;
    profile) stage_profile ;;
    endings) stage_endings ;;
  esac
done

{
  echo
  if [[ -s $work/notes.md ]]; then
    echo "## Notes"
    echo
    cat "$work/notes.md"
    echo
  fi
  for file in compare.md sweep.md sweep.json profile.md profile.json endings.md; do
    [[ -s $out/$file ]] && echo "- wrote \`$file\` ($(wc -c < "$out/$file") bytes)"
  done
  echo
  echo "Finished $(date -u +%FT%TZ): exit $failed (0: every step ended as expected)."
} >> "$summary"
echo "== $(date -u +%FT%TZ) done, exit $failed; work folder $work"
record_finish "$failed" "$work=WORK" "$out=OUT"
