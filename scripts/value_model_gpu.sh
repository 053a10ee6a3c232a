#!/usr/bin/env bash
# Collect fresh trees with the fine-tuned default policy and train a value model on them, on one GPU.
#
#   bash scripts/value_model_gpu.sh OUT            # --device cuda: collection, training and ranking there
#   DEVICE=cpu TASKS=2 ... bash scripts/value_model_gpu.sh OUT   # the same steps, small, on a CPU (its test)
#
# Why one script: on a 2-core CPU, collecting 320 trees took several sessions and training on them 1.5 hours
# (data/value_model/README.md, data/value_model/curve/README.md). On a GPU both fit in minutes, so a GPU session
# should spend its time here and nowhere else. The steps are the documented commands, in order:
#   1. `jupiter nbqa synth` TASKS new tasks (synth seed SEED: not 13 or 21, the seeds of the shipped data;
#      benchmark tables are excluded as always) and `jupiter nbqa to-dabench`, so the bench command collects;
#   2. `jupiter bench dabench --mode collect` at the paper's collection settings (c_puct 1.25, T 1.0, top-p 0.95,
#      K 3, depth 10, 3 consecutive errors), iterations cut to ITERATIONS, the policy LLM (default: transformers
#      on DEVICE, since a GPU machine may lack vLLM; LLM=vllm:default where vLLM is installed is faster);
#   3. `jupiter value extract` on the new trees, joined to the shipped samples (the first SHIPPED of them;
#      SHIPPED=0 leaves them out); TARGET=tree-centred labels each node with its Q minus its tree's mean
#      (`extract --target`), the shipped trees then extracted again the same way;
#   4. `jupiter value train` (the paper profile, tree packs; bfloat16 on a GPU; MAX_STEPS cuts it);
#   5. `jupiter value rank` on the dev trees (data/value_model/dev-trees, never trained on) or RANK_RUN.
# Every step resumes: the bench run from its checkpoints, the training from its checkpoints, and a step whose
# output is already there is skipped. OUT/timings.jsonl gives each step's seconds; OUT/rank.json the AUCs.
set -euo pipefail
OUT=${1:?usage: value_model_gpu.sh OUT   (environment: DEVICE TASKS SEED ITERATIONS EXPANSIONS LLM ...)}
cd "$(dirname "$0")/.."
REPO=$(pwd)

DEVICE=${DEVICE:-cuda}
TASKS=${TASKS:-40}
SEED=${SEED:-31}
ITERATIONS=${ITERATIONS:-12}
EXPANSIONS=${EXPANSIONS:-3}
MAX_TOKENS=${MAX_TOKENS:-384}
CONCURRENCY=${CONCURRENCY:-20}
LLM=${LLM:-"hf:default#device=$DEVICE"}
SHIPPED=${SHIPPED:-all}
TARGET=${TARGET:-q}
MAX_STEPS=${MAX_STEPS:-}
TRAIN_TOKENS=${TRAIN_TOKENS:-8000}
RANK_RUN=${RANK_RUN:-}
RANK_DATA=${RANK_DATA:-}
JUPITER=${JUPITER:-jupiter}
case "$DEVICE" in cpu) DTYPE=float32 ;; *) DTYPE=bfloat16 ;; esac

say() { echo "value_model_gpu.sh: $*" >&2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TIMINGS="$OUT/timings.jsonl"

# Runs one step unless its output exists; appends {"step", "seconds"} to timings.jsonl.
step() {
  local name=$1 output=$2
  shift 2
  if [ -e "$output" ]; then
    say "$name: $output is there, skipped"
    return
  fi
  say "$name"
  local started=$SECONDS
  "$@"
  printf '{"step": "%s", "seconds": %d}\n' "$name" "$((SECONDS - started))" >>"$TIMINGS"
}

synth() {
  "$JUPITER" nbqa synth --out "$OUT/tasks" --tasks "$TASKS" --seed "$SEED" --recipe 4 --loose-share 0.7 \
    --mistake-share 0
  "$JUPITER" nbqa to-dabench "$OUT/tasks/nbqa.jsonl" --out "$OUT/bench"
}

collect() {
  "$JUPITER" bench dabench --data "$OUT/bench" --mode collect --iterations "$ITERATIONS" --expansions "$EXPANSIONS" \
    --llm "$LLM" --limit "$TASKS" --max-tokens "$MAX_TOKENS" --seed 0 --concurrency "$CONCURRENCY" \
    --out "$OUT/collect" --no-progress
  touch "$OUT/collect/.done"
}

samples() {
  "$JUPITER" value extract "$OUT"/collect/trees/*.json -o "$OUT/new-samples.jsonl" --seed 0 --target "$TARGET"
  local shipped="$OUT/shipped-samples.jsonl"
  : >"$shipped"
  if [ "$SHIPPED" != 0 ]; then
    if [ "$TARGET" = q ]; then
      for part in "$REPO"/data/value_model/vm5-part*/samples.jsonl.gz; do gzip -dc "$part"; done >"$shipped.all"
    else  # the shipped samples hold raw Q: their trees are extracted again (data/value_model/curve/README.md)
      : >"$shipped.all"
      for part in "$REPO"/data/value_model/vm5-part*/; do
        local trees="$OUT/shipped-trees/$(basename "$part")"
        mkdir -p "$trees" && tar xzf "$part/trees.tar.gz" -C "$trees"
        "$JUPITER" value extract "$trees"/trees/*.json -o "$trees.jsonl" --seed 0 --target "$TARGET"
        cat "$trees.jsonl" >>"$shipped.all"
      done
    fi
    if [ "$SHIPPED" = all ]; then mv "$shipped.all" "$shipped"; else head -n "$SHIPPED" "$shipped.all" >"$shipped"; fi
    rm -f "$shipped.all"
  fi
  cat "$OUT/new-samples.jsonl" "$shipped" >"$OUT/samples.jsonl.part"
  mv "$OUT/samples.jsonl.part" "$OUT/samples.jsonl"
  say "samples: $(wc -l <"$OUT/new-samples.jsonl") new, $(wc -l <"$shipped") shipped"
}

train() {
  "$JUPITER" value train "$OUT/samples.jsonl" --base default --out "$OUT/model" --profile paper \
    --max-tokens "$TRAIN_TOKENS" --device "$DEVICE" --dtype "$DTYPE" --seed 0 ${MAX_STEPS:+--max-steps "$MAX_STEPS"}
}

rank() {
  local run=$RANK_RUN data=()
  if [ -z "$run" ]; then
    tar xzf "$REPO/data/value_model/dev-trees/mcts12-s0.tar.gz" -C "$OUT"
    run="$OUT/mcts12-s0"
  fi
  [ -n "$RANK_DATA" ] && data=(--data "$RANK_DATA")
  "$JUPITER" value rank "$OUT/model" "$run" "${data[@]}" --json --device "$DEVICE" --dtype "$DTYPE" \
    >"$OUT/rank.json.part"
  mv "$OUT/rank.json.part" "$OUT/rank.json"
}

step "synthesize $TASKS tasks (seed $SEED)" "$OUT/bench" synth
step "collect $TASKS trees ($ITERATIONS iterations, K $EXPANSIONS, $LLM)" "$OUT/collect/.done" collect
step "extract the samples" "$OUT/samples.jsonl" samples
step "train the value model ($DEVICE, $DTYPE)" "$OUT/model/metrics.json" train
step "rank the dev trees" "$OUT/rank.json" rank
say "done: $OUT/model, $OUT/rank.json, $TIMINGS"
