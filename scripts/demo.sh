#!/usr/bin/env bash
# The main job on the embedded default (SQLite under a throw-away CAIRN_HOME, the bundled model):
# load the shipped example memories, rank three prompts, show the injection blocks and the logged deliveries.
set -euo pipefail
cd "$(dirname "$0")/.."
export CAIRN_HOME="${CAIRN_HOME:-$PWD/.cairn-demo}"
rm -rf "$CAIRN_HOME"
cairn=".venv/bin/cairn"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "import the example memories (SQLite in $CAIRN_HOME)"
$cairn memory import cairn_cli/data/example_memories.jsonl
step "importing again merges instead of duplicating"
$cairn memory import cairn_cli/data/example_memories.jsonl

step "start the model daemon (owns the embedding model and the reranker; the hook talks to it over a socket)"
trap '$cairn daemon stop >/dev/null 2>&1 || true' EXIT
# prints the daemon's state and, when no cross-encoder is in the Hugging Face cache, once, how to get one
$cairn daemon start

prompts=(
  "the integration tests all fail with connection refused, what do I need to start first?"
  "how should I store prices for the checkout, and why did the VAT report break?"
  "I want to deploy this fix to production today"
)
turn=0
for p in "${prompts[@]}"; do
  turn=$((turn + 1))
  step "cairn rank (turn $turn): $p"
  $cairn rank "$p" --scope webshop --session demo -k 3
done

step "Claude Code's UserPromptSubmit hook: the payload on stdin, the rules and memories on stdout"
printf '%s' '{"session_id": "demo-hook", "cwd": "/src/webshop", "hook_event_name": "UserPromptSubmit",
  "prompt": "the integration tests fail with connection refused again"}' | $cairn hook prompt | tee "$CAIRN_HOME/injected.txt"
ids=($(grep -o '<memory id="[0-9]*"' "$CAIRN_HOME/injected.txt" | grep -o '[0-9]*'))

step "the Stop hook: the agent's answer with its [cm] block (grades, evidence, a new memory) and engagement"
# grade what was shown (the composite floor may have kept fewer than three): the first load-bearing, the second
# noise, the third marginal
grades=("3" "0!" "1")
rg=""
for i in "${!ids[@]}"; do
  if [ "$i" -lt 3 ]; then rg="$rg${rg:+, }\"${ids[$i]}:${grades[$i]}\""; fi
done
answer="Run make db-up first: the tests need PostgreSQL listening on 5433.
[cm]{\"m\": [{\"content\": \"Integration tests need make db-up first (PostgreSQL on 5433), else connection refused\", \"keywords\": [\"pytest\", \"db-up\"], \"scope\": \"webshop\", \"kind\": \"procedure\"}], \"rg\": [$rg], \"cu\": [${ids[0]}]}[/cm]"
python3 -c 'import json, sys; print(json.dumps({"session_id": "demo-hook", "hook_event_name": "Stop",
  "last_assistant_message": sys.argv[1]}))' "$answer" | $cairn hook stop
tail -n 2 "$CAIRN_HOME/logs/hook.log"
$cairn deliveries --session demo-hook

step "the write-side A/B: each prompt's arm, the versions its memories carry, and how each arm's memories fare"
$cairn ab status

step "what the labels say so far: per generation version and reranker, grades and engagement per method"
$cairn stats deliveries

step "the same prompt with the daemon stopped: the in-process lexical fallback answers and says so"
$cairn daemon stop
$cairn rank "${prompts[0]}" --scope webshop --session demo -k 3

step "the logged deliveries, with provenance"
$cairn deliveries --session demo
