#!/bin/bash
# snn lm plan: SpikingJelly's planner cases through the CLI (world 2 at 8 GiB for both
# objectives, the 18.25 MiB budget at sequence 127, the same with fp8 "hybrid"); stdout is
# one canonical TrainingConfig JSON that Python parses, that `snn lm plan` accepts again
# (a fixed point: planning a planned config gives the same JSON) and whose fields are the
# plan's; stderr holds the estimate; every bad input exits 2 with one "snn: error:" line.
set -u
B=${1:?build dir}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
S="$B/snn"

check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fail=1; fi; }
expect_error() {
  local what=$1 needle=$2; shift 2
  "$S" lm plan "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^snn: error: ' "$tmp/err" ||
     ! grep -qF -- "$needle" "$tmp/err" || [ -s "$tmp/out" ]; then
    echo "FAIL: $what: rc=$rc, expected exit 2 with '$needle' and no stdout; stderr:" >&2; cat "$tmp/err" >&2; fail=1
  fi
}
# field PATH of the JSON on stdout (dotted), printed as Python's json.dumps
field() { $PY -c 'import json,sys; v=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v=v[k]
print(json.dumps(v))' "$1" "$2"; }

# The reference's test model (LayerNorm: snn's SpikeLM requires it; see docs/lm.md).
cat >"$tmp/c1.json" <<'EOF'
{"_target_":"snn.lm.TrainingConfig",
 "model":{"_target_":"snn.lm.SpikeLMConfig",
   "transformer":{"_target_":"snn.lm.TransformerConfig","num_layers":4,"hidden_size":128,"num_attention_heads":4,
     "num_query_groups":2,"kv_channels":32,"ffn_hidden_size":512,"activation":"swiglu","normalization":"LayerNorm",
     "calculate_per_token_loss":true,"bf16":true,"params_dtype":"bfloat16","pipeline_dtype":"bfloat16"},
   "vocab_size":1024,"max_sequence_length":512,"time_steps":4},
 "optimizer":{"_target_":"snn.lm.OptimizerConfig","lr":1e-4,"min_lr":1e-5,"bf16":true,"params_dtype":"bfloat16",
   "use_distributed_optimizer":true},
 "dataset_kwargs":{"path":"data"},"sequence_length":128,"micro_batch_size":1,"global_batch_size":4,"train_steps":10}
EOF
sed -e 's/"hidden_size":128,"num_attention_heads":4,/"hidden_size":120,"num_attention_heads":3,/' \
    -e 's/"num_query_groups":2,"kv_channels":32,"ffn_hidden_size":512/"num_query_groups":3,"kv_channels":40,"ffn_hidden_size":480/' \
    -e 's/"sequence_length":128/"sequence_length":127/' "$tmp/c1.json" >"$tmp/c2.json"
sed -e 's/"pipeline_dtype":"bfloat16"}/"pipeline_dtype":"bfloat16","fp8":"hybrid"}/' "$tmp/c2.json" >"$tmp/c3.json"
check "fixtures differ" '! cmp -s "$tmp/c2.json" "$tmp/c3.json" && ! cmp -s "$tmp/c1.json" "$tmp/c2.json"'

check "help" '"$S" lm plan --help | grep -q -- "--device-memory-gib"'
check "lm --help lists plan" '"$S" lm --help | grep -q "^  plan "'

# case 1: world 2, 8 GiB, throughput -> TP 1 PP 1 CP 1 (DP 2), no recompute, memopt off
"$S" lm plan --world-size 2 --device-memory-gib 8 "$tmp/c1.json" >"$tmp/p1.json" 2>"$tmp/e1"
rc=$?
check "case 1 exit 0 ($(cat "$tmp/e1"))" '[ $rc -eq 0 ]'
check "case 1 one JSON line" '[ "$(wc -l <"$tmp/p1.json")" -eq 1 ]'
check "case 1 JSON parses" '$PY -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/p1.json"'
check "case 1 canonical (sorted, compact)" '$PY -c "import json,sys; t=open(sys.argv[1]).read().strip(); assert t == json.dumps(json.loads(t), sort_keys=True, separators=(\",\", \":\"))" "$tmp/p1.json"'
check "case 1 TP 1" '[ "$(field "$tmp/p1.json" model.transformer.tensor_model_parallel_size)" = 1 ]'
check "case 1 PP 1" '[ "$(field "$tmp/p1.json" model.transformer.pipeline_model_parallel_size)" = 1 ]'
check "case 1 no recompute" '[ "$(field "$tmp/p1.json" model.transformer.recompute_granularity)" = null ]'
check "case 1 memopt off" '[ "$(field "$tmp/p1.json" use_snn_memopt)" = false ]'
check "case 1 stderr estimate" 'grep -q "^snn lm plan: tensor 1 x pipeline 1 x context 1 x data 2 (2 microbatches), recompute none, use_snn_memopt false; estimate 25640140.8" "$tmp/e1"'
# a planned config plans to itself
"$S" lm plan --world-size 2 --device-memory-gib 8 "$tmp/p1.json" >"$tmp/p1b.json" 2>/dev/null
check "case 1 fixed point" 'cmp -s "$tmp/p1.json" "$tmp/p1b.json"'
# the config may also come first or through --config, options in any order
"$S" lm plan "$tmp/c1.json" --device-memory-gib=8 --world-size 2 >"$tmp/p1c.json" 2>/dev/null
check "positional first, --opt=value" 'cmp -s "$tmp/p1.json" "$tmp/p1c.json"'
"$S" lm plan --config "$tmp/c1.json" --world-size 2 --device-memory-gib 8 >"$tmp/p1d.json" 2>/dev/null
check "--config" 'cmp -s "$tmp/p1.json" "$tmp/p1d.json"'

# case 1, objective memory: memopt on, still no recompute, TP 2
"$S" lm plan --world-size 2 --device-memory-gib 8 --objective memory "$tmp/c1.json" >"$tmp/p1m.json" 2>"$tmp/e1m"
rc=$?
check "memory exit 0" '[ $rc -eq 0 ]'
check "memory memopt on" '[ "$(field "$tmp/p1m.json" use_snn_memopt)" = true ]'
check "memory no recompute" '[ "$(field "$tmp/p1m.json" model.transformer.recompute_granularity)" = null ]'
check "memory TP 2, sequence parallel" '[ "$(field "$tmp/p1m.json" model.transformer.tensor_model_parallel_size)" = 2 ] && [ "$(field "$tmp/p1m.json" model.transformer.sequence_parallel)" = true ]'

# case 2: 18.25 MiB (= 0.017822265625 GiB), fraction 1, sequence 127 -> selective core_attn + memopt
"$S" lm plan --world-size 2 --device-memory-gib 0.017822265625 --memory-fraction 1 "$tmp/c2.json" >"$tmp/p2.json" 2>"$tmp/e2"
rc=$?
check "case 2 exit 0 ($(cat "$tmp/e2"))" '[ $rc -eq 0 ]'
check "case 2 selective" '[ "$(field "$tmp/p2.json" model.transformer.recompute_granularity)" = "\"selective\"" ]'
check "case 2 core_attn" '[ "$(field "$tmp/p2.json" model.transformer.recompute_modules)" = "[\"core_attn\"]" ]'
check "case 2 memopt" '[ "$(field "$tmp/p2.json" use_snn_memopt)" = true ]'
check "case 2 PP 2, pipeline dtype" '[ "$(field "$tmp/p2.json" model.transformer.pipeline_model_parallel_size)" = 2 ] && [ "$(field "$tmp/p2.json" model.transformer.pipeline_dtype)" = "\"bfloat16\"" ]'
check "case 2 budget on stderr" 'grep -q "budget 19136512 bytes (18.25 MiB)" "$tmp/e2"'

# case 3: the same with fp8 hybrid -> no fit, the reference's message
expect_error "case 3 fp8 hybrid" \
  "snn: error: lm plan: No topology fits the memory budget: budget=19136512 bytes, smallest estimate=19369478 bytes." \
  --world-size 2 --device-memory-gib 0.017822265625 --memory-fraction 1 "$tmp/c3.json"
expect_error "no topology" "No topology satisfies the model and batch constraints." \
  --world-size 3 --device-memory-gib 8 "$tmp/c1.json"

# bad input
expect_error "no world" "--world-size is required" --device-memory-gib 8 "$tmp/c1.json"
expect_error "no memory" "--device-memory-gib is required" --world-size 2 "$tmp/c1.json"
expect_error "no config" "TrainingConfig JSON file is required" --world-size 2 --device-memory-gib 8
expect_error "two configs" "give one config file" --world-size 2 --device-memory-gib 8 "$tmp/c1.json" "$tmp/c2.json"
expect_error "config twice" "give the config once" --world-size 2 --device-memory-gib 8 --config "$tmp/c1.json" "$tmp/c1.json"
expect_error "world 0" "--world-size must be a positive integer" --world-size 0 --device-memory-gib 8 "$tmp/c1.json"
expect_error "world -2" "--world-size must be a positive integer" --world-size -2 --device-memory-gib 8 "$tmp/c1.json"
expect_error "world 2x" "--world-size expects an integer" --world-size 2x --device-memory-gib 8 "$tmp/c1.json"
expect_error "world overflow" "--world-size must be between" --world-size 99999999999 --device-memory-gib 8 "$tmp/c1.json"
expect_error "memory 0" "--device-memory-gib must be a positive number" --world-size 2 --device-memory-gib 0 "$tmp/c1.json"
expect_error "memory -1" "--device-memory-gib must be a positive number" --world-size 2 --device-memory-gib -1 "$tmp/c1.json"
expect_error "memory 8G" "--device-memory-gib must be a positive number" --world-size 2 --device-memory-gib 8G "$tmp/c1.json"
expect_error "memory nan" "--device-memory-gib must be a positive number" --world-size 2 --device-memory-gib nan "$tmp/c1.json"
expect_error "memory tiny" "out of range" --world-size 2 --device-memory-gib 1e-12 "$tmp/c1.json"
expect_error "memory huge" "out of range" --world-size 2 --device-memory-gib 1e12 "$tmp/c1.json"
expect_error "objective" "--objective must be throughput or memory" --world-size 2 --device-memory-gib 8 --objective speed "$tmp/c1.json"
expect_error "fraction 0" "--memory-fraction must be in (0, 1]" --world-size 2 --device-memory-gib 8 --memory-fraction 0 "$tmp/c1.json"
expect_error "fraction 1.5" "--memory-fraction must be in (0, 1]" --world-size 2 --device-memory-gib 8 --memory-fraction 1.5 "$tmp/c1.json"
expect_error "fraction text" "--memory-fraction must be in (0, 1]" --world-size 2 --device-memory-gib 8 --memory-fraction half "$tmp/c1.json"
expect_error "unknown option" "unknown option '--tp'" --world-size 2 --device-memory-gib 8 --tp 2 "$tmp/c1.json"
expect_error "missing file" "lm plan: loading the config" --world-size 2 --device-memory-gib 8 "$tmp/none.json"
printf '{"_target_":"snn.lm.TrainingConfig",' >"$tmp/bad.json"
expect_error "malformed JSON" "lm plan: loading the config" --world-size 2 --device-memory-gib 8 "$tmp/bad.json"
sed -e 's/"global_batch_size":4/"global_batch_size":5,"micro_batch_size":2/' -e 's/"micro_batch_size":1,//' "$tmp/c1.json" >"$tmp/bad2.json"
expect_error "invalid config" "divisible" --world-size 2 --device-memory-gib 8 "$tmp/bad2.json"

[ $fail -eq 0 ] && echo "cli_lm_plan: ok"
exit $fail
