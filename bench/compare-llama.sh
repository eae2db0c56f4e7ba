#!/usr/bin/env bash
# Side by side: our engine (ds4-bench) against llama.cpp's deepseek4 (ds4-ref-runner
# bench: flash attention on, F16 KV, its fastest CPU settings) on the same GGUF with
# the same thread count. For each mix, a `bench`-preset model (Flash widths) is made
# once and kept; then RUNS alternating runs (ours, llama, ours, llama, ...), each
# prefilling P tokens in one go and decoding G tokens greedily. This VM's host moves
# the memory-read bandwidth by 2x within minutes (34 and 74 GB/s in one session), so
# each decode is set against the read bandwidth of the same moments: ours measures it
# itself between its decode steps (ds4-bench --read-bandwidth: passes before, between
# and after the steps, their median), and ds4-bench-bandwidth probes it right after
# each llama.cpp run for llama.cpp's figure.
# Ours runs with --huge-pages (its mapping touched before timing, in 2 MiB pages: the
# first run may read the file again to get them), as llama.cpp reads and repacks its
# weights at load; neither side's load is timed. Both then read the same page cache.
#
# Reported per mix: median and every run of prefill and decode tokens/s for both, the
# ratios ours/llama, the decode weight bandwidth of each (decode weight bytes/token,
# as ds4-bench reports it, x decode tokens/s) and, per engine, the median over the
# rounds of its decode weight bandwidth as % of the read bandwidth of its run (ours:
# measured in the run; llama.cpp: the probe after it). Ours against the probe after
# llama.cpp's run, the figure before ds4-bench measured it itself, is printed too. --out FILE also
# writes all of it as JSON. Not part of `make test`.
#
# Usage: bench/compare-llama.sh [options]
#   --build DIR      build folder with bin/ds4-bench, bin/ds4-mkmodel, bin/ds4-ref-runner and
#                    bench/ds4-bench-bandwidth (default: build)
#   --mixes LIST     comma-separated ds4-mkmodel mixes (default: ds4-q2,ds4-q4); an entry
#                    llama:PRESET (llama:Q4_K_M, llama:IQ2_XXS, ...) is instead the file
#                    llama.cpp's own llama_model_quantize makes with that llama-quantize
#                    preset from the q8_0 mix's model (ds4-ref-runner model-quantize
#                    --allow-requantize --imatrix-from-weights: importance from the weights'
#                    column energy, as the IQ1/IQ2 presets require one), as community files are made
#   --layers L       layers of each model (default 2)
#   --preset NAME    ds4-mkmodel preset (default bench; to smoke-test this script: small --layers 3)
#   --prompt P       prompt tokens, ids (i*7919+13) mod 1000 (default 512)
#   --gen G          decoded tokens (default 128)
#   --runs R         runs of each engine, alternating (default 5)
#   --threads N      threads for both engines and the bandwidth probe (default: physical cores)
#   --models DIR     model cache folder (default: $DS4_BENCH_MODELS, else <repo>/.cache/bench-models)
#   --bandwidth-bytes N  buffer of the read-bandwidth probe, k/m/g suffix allowed (default 4g)
#   --warmup         both engines prefill the prompt once untimed first (ds4-bench --warmup,
#                    ds4-ref-runner bench --warmup; as llama-bench's default warm-up run), so
#                    the timed prefill excludes one-time costs (first touch of buffers)
#   --isa LEVEL      both engines at one x86 level: avx2 runs ours with DS4_ISA=avx2 and
#                    llama.cpp with only its AVX2 build (ds4-ref-runner --cpu-variant haswell),
#                    so the AVX2 side by side runs on an AVX-512 machine too (default: each
#                    engine's own choice for this CPU)
#   --llama-cpu-variant NAME  load only llama.cpp's libggml-cpu-NAME.so (e.g. icelake): where its
#                    own choice for this CPU fails (its sapphirerapids build, with AMX, aborts
#                    on the bench files: GGML_ASSERT(*cur_backend_id != -1)); overrides --isa's
#   --out FILE       write the summary as JSON
# A model file is reused when present (the bench ones are 5-9 GB and take a minute or
# more to make); delete it to regenerate.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "compare-llama: $*" >&2; exit 1; }

physical_cores() {
  local n
  n=$(lscpu -p=Core,Socket 2>/dev/null | grep -v '^#' | sort -u | wc -l) || n=0
  [[ "$n" -ge 1 ]] && echo "$n" || nproc
}

build="$repo_root/build"
mixes="ds4-q2,ds4-q4"
layers=2
preset=bench
prompt=512
gen=128
runs=5
threads=""
models="${DS4_BENCH_MODELS:-$repo_root/.cache/bench-models}"
out=""
bandwidth_bytes=4g
warmup=()
isa=""
llama_cpu_variant=""
while [[ $# -gt 0 ]]; do
  [[ "$1" == -h || "$1" == --help ]] && { sed -n '2,50s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0; }
  if [[ "$1" == --warmup ]]; then warmup=(--warmup); shift; continue; fi
  [[ $# -ge 2 ]] || die "$1 needs a value"
  case "$1" in
    --build) build="$2" ;;
    --mixes) mixes="$2" ;;
    --layers) layers="$2" ;;
    --preset) preset="$2" ;;
    --prompt) prompt="$2" ;;
    --gen) gen="$2" ;;
    --runs) runs="$2" ;;
    --threads) threads="$2" ;;
    --models) models="$2" ;;
    --out) out="$2" ;;
    --bandwidth-bytes) bandwidth_bytes="$2" ;;
    --isa) isa="$2" ;;
    --llama-cpu-variant) llama_cpu_variant="$2" ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift 2
done
threads="${threads:-$(physical_cores)}"
# Each engine's switch for one ISA level (llama.cpp: the name of its CPU library).
ours_env=()
llama_variant=()
case "$isa" in
  "") ;;
  avx2) ours_env=(DS4_ISA=avx2); llama_variant=(--cpu-variant haswell) ;;
  *) die "--isa must be avx2 (or omitted for each engine's own choice), not '$isa'" ;;
esac
if [[ -n "$llama_cpu_variant" ]]; then
  [[ "$llama_cpu_variant" =~ ^[a-z0-9]+$ ]] || die "--llama-cpu-variant must be a library name such as icelake, not '$llama_cpu_variant'"
  llama_variant=(--cpu-variant "$llama_cpu_variant")
fi
for v in layers prompt gen runs threads; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--$v must be a positive integer, not '${!v}'"
done

ours="$build/bin/ds4-bench"
llama="$build/bin/ds4-ref-runner"
mkmodel="$build/bin/ds4-mkmodel"
bandwidth="$build/bench/ds4-bench-bandwidth"
for exe in "$ours" "$llama" "$mkmodel" "$bandwidth"; do
  [[ -x "$exe" ]] || die "$exe not built (ninja -C $build ds4-bench ds4-ref-runner ds4-mkmodel ds4-bench-bandwidth; make reference)"
done
command -v python3 >/dev/null || die "python3 is needed for the summary"
mkdir -p "$models"

work="$(mktemp -d "${TMPDIR:-/tmp}/ds4-compare-llama.XXXXXX")"
trap 'rm -rf "$work"' EXIT
tokens="$work/tokens.json"
awk -v n="$prompt" 'BEGIN { printf "["; for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), (i * 7919 + 13) % 1000; print "]" }' \
  >"$tokens"

# One line per measurement: mix <TAB> kind <TAB> JSON.
results="$work/results.tsv"
: >"$results"
fail() { echo "compare-llama: $1 failed:" >&2; tail -n 20 "$2" >&2; exit 1; }

run_ours() {  # mix model run
  local csv="$work/ours.csv"
  rm -f "$csv"
  env "${ours_env[@]}" "$ours" -m "$2" --tokens-file "$tokens" --ctx-start "$prompt" --ctx-max "$prompt" --gen-tokens "$gen" \
    -t "$threads" --huge-pages "${warmup[@]}" --read-bandwidth "$bandwidth_bytes" --csv "$csv" \
    >"$work/ours.out" 2>"$work/ours.err" || fail "ds4-bench (run $3)" "$work/ours.err"
  python3 - "$csv" "$work/ours.err" "$1" "$3" >>"$results" <<'EOF'
import csv, json, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
if not rows:
    sys.exit(f"compare-llama: {sys.argv[1]} has no rows")
row = rows[-1]
err = open(sys.argv[2]).read()
m = re.search(r"decode weight bytes/token: *([0-9]+)", err)
rb = re.findall(r"read bandwidth ([0-9.]+) GB/s \(median of", err)
r = {"run": int(sys.argv[4]), "prefill_tokens": int(row["prefill_tokens"]), "prefill_tps": float(row["prefill_tps"]),
     "gen_tokens": int(row["gen_tokens"]), "gen_tps": float(row["gen_tps"]),
     "kvcache_bytes": int(row["kvcache_bytes"]), "decode_weight_bytes": int(m.group(1)) if m else None,
     "read_gbps": float(rb[-1]) if rb else None}
print(f"{sys.argv[3]}\tours\t{json.dumps(r)}")
EOF
}

run_llama() {  # mix model run
  "$llama" "${llama_variant[@]}" bench -m "$2" --tokens "$tokens" --gen "$gen" --threads "$threads" "${warmup[@]}" \
    >"$work/llama.out" 2>"$work/llama.err" || fail "ds4-ref-runner bench (run $3)" "$work/llama.err"
  python3 -c 'import json, sys; r = json.loads(open(sys.argv[1]).read()); r["run"] = int(sys.argv[3]); print(f"{sys.argv[2]}\tllama\t{json.dumps(r)}")' \
    "$work/llama.out" "$1" "$3" >>"$results"
}

run_bandwidth() {  # mix run
  "$bandwidth" --threads "$threads" --bytes "$bandwidth_bytes" >"$work/bw.out" 2>"$work/bw.err" || fail "ds4-bench-bandwidth" "$work/bw.err"
  python3 -c 'import json, sys; r = json.loads(open(sys.argv[1]).read()); r["run"] = int(sys.argv[3]); print(f"{sys.argv[2]}\tbandwidth\t{json.dumps(r)}")' \
    "$work/bw.out" "$1" "$2" >>"$results"
}

# The model of a ds4-mkmodel mix, made once and kept.
make_mix_model() {  # mix path
  [[ -f "$2" ]] && return
  echo "compare-llama: making $2 (once; kept for later runs)" >&2
  "$mkmodel" --preset "$preset" --layers "$layers" --mix "$1" --seed 1 --out "$2.part" \
    >"$work/mkmodel.log" 2>&1 || { rm -f "$2.part"; fail "ds4-mkmodel --mix $1" "$work/mkmodel.log"; }
  mv "$2.part" "$2"
}

# A llama:PRESET entry's model: llama_model_quantize over the q8_0 model, made once and kept.
make_llama_preset_model() {  # preset path
  local source="$models/$preset-$layers-q8_0.gguf"
  [[ -f "$2" ]] && return
  make_mix_model q8_0 "$source"
  echo "compare-llama: making $2 with llama_model_quantize $1 (once; kept for later runs)" >&2
  "$llama" model-quantize -m "$source" --out "$2.part" --ftype "$1" --allow-requantize --imatrix-from-weights \
    --threads "$threads" >"$work/quantize.log" 2>&1 || { rm -f "$2.part"; fail "ds4-ref-runner model-quantize --ftype $1" "$work/quantize.log"; }
  mv "$2.part" "$2"
}

IFS=, read -r -a mix_list <<<"$mixes"
for mix in "${mix_list[@]}"; do
  model="$models/$preset-$layers-${mix/:/-}.gguf"
  if [[ "$mix" == llama:* ]]; then
    make_llama_preset_model "${mix#llama:}" "$model"
  else
    make_mix_model "$mix" "$model"
  fi
  printf '%s\tmodel\t{"path": "%s", "bytes": %s}\n' "$mix" "$model" "$(stat -c %s "$model")" >>"$results"
  cat "$model" >/dev/null  # into the page cache, so neither engine's first run reads the disk
  echo "compare-llama: $mix: $runs alternating runs, $threads threads" >&2
  load_start=$(cut -d' ' -f1 /proc/loadavg)  # other jobs on the machine skew everything; recorded with the figures
  for ((r = 1; r <= runs; r++)); do
    run_ours "$mix" "$model" "$r"
    run_llama "$mix" "$model" "$r"
    run_bandwidth "$mix" "$r"
  done
  printf '%s\tload\t{"start": %s, "end": %s}\n' "$mix" "$load_start" "$(cut -d' ' -f1 /proc/loadavg)" >>"$results"
done

python3 - "$results" "$out" "$prompt" "$gen" "$runs" "$threads" "$layers" "$preset" "${#warmup[@]}" "${isa:-native}${llama_cpu_variant:+ (llama.cpp $llama_cpu_variant)}" <<'EOF'
import json, statistics, sys
results, out_path, prompt, gen, runs, threads, layers, preset, warmup, isa = sys.argv[1:]
warmup = warmup != "0"
mixes = {}
for line in open(results):
    mix, kind, text = line.rstrip("\n").split("\t", 2)
    m = mixes.setdefault(mix, {"ours": [], "llama": [], "bandwidth": []})
    if kind in ("ours", "llama", "bandwidth"):
        m[kind].append(json.loads(text))
    else:
        m[kind] = json.loads(text)

def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"

summary = {"prompt": int(prompt), "gen": int(gen), "runs": int(runs), "threads": int(threads),
           "layers": int(layers), "preset": preset, "warmup": warmup, "isa": isa, "mixes": {}}
for mix, m in mixes.items():
    s = {"model": m["model"]["path"], "model_bytes": m["model"]["bytes"],
         "load_average_start": m["load"]["start"], "load_average_end": m["load"]["end"]}
    for eng in ("ours", "llama"):
        for key in ("prefill_tps", "gen_tps"):
            runs_v = [r[key] for r in m[eng]]
            s[f"{eng}_{key}_runs"] = runs_v
            s[f"{eng}_{key}"] = statistics.median(runs_v)
    s["prefill_ratio"] = s["ours_prefill_tps"] / s["llama_prefill_tps"]
    s["decode_ratio"] = s["ours_gen_tps"] / s["llama_gen_tps"]
    wb = [r.get("decode_weight_bytes") for r in m["ours"] if r.get("decode_weight_bytes")]
    s["decode_weight_bytes_per_token"] = wb[0] if wb else None
    s["ours_decode_weight_gbps"] = wb[0] * s["ours_gen_tps"] / 1e9 if wb else None
    s["llama_decode_weight_gbps"] = wb[0] * s["llama_gen_tps"] / 1e9 if wb else None
    # Each round's probe (its median over repeats) against that round's decode runs.
    bw = {r["run"]: r for r in m["bandwidth"]}
    s["read_bandwidth_runs_gbps"] = [bw[r]["median_gbps"] for r in sorted(bw)]
    s["read_bandwidth_median_gbps"] = statistics.median(s["read_bandwidth_runs_gbps"])
    s["read_bandwidth_max_gbps"] = max(r["max_gbps"] for r in m["bandwidth"])
    # Ours: against the read bandwidth measured inside its own run.
    s["ours_read_bandwidth_runs_gbps"] = [r.get("read_gbps") for r in m["ours"]]
    pcts = [100 * wb[0] * r["gen_tps"] / 1e9 / r["read_gbps"] for r in m["ours"] if wb and r.get("read_gbps")]
    s["ours_decode_weight_pct_of_read_runs"] = pcts
    s["ours_decode_weight_pct_of_read"] = statistics.median(pcts) if pcts else None
    # llama.cpp (and ours, for comparison with earlier runs): against the probe after llama.cpp's run.
    for eng, key in (("llama", "llama_decode_weight_pct_of_read"), ("ours", "ours_decode_weight_pct_of_probe_after")):
        pcts = [100 * wb[0] * r["gen_tps"] / 1e9 / bw[r["run"]]["median_gbps"] for r in m[eng] if wb and r["run"] in bw]
        s[key + "_runs"] = pcts
        s[key] = statistics.median(pcts) if pcts else None
    summary["mixes"][mix] = s

    print(f"\n{mix}: {preset} preset, {layers} layers, {s['model_bytes'] / 1e9:.2f} GB; "
          f"prefill {prompt} tokens{' after an untimed warm-up prefill' if warmup else ' (cold: no warm-up)'}, "
          f"decode {gen}; {threads} threads; {runs} alternating runs; ISA {isa}; "
          f"load average {m['load']['start']} -> {m['load']['end']}")
    print(f"  {'':24} {'median':>10}   runs")
    for label, key in (("prefill t/s  ours", "ours_prefill_tps"), ("prefill t/s  llama.cpp", "llama_prefill_tps"),
                       ("decode t/s   ours", "ours_gen_tps"), ("decode t/s   llama.cpp", "llama_gen_tps")):
        print(f"  {label:24} {s[key]:10.2f}   " + " ".join(fmt(v) for v in s[key + "_runs"]))
    print(f"  {'prefill ours/llama.cpp':24} {s['prefill_ratio']:9.2f}x")
    print(f"  {'decode ours/llama.cpp':24} {s['decode_ratio']:9.2f}x")
    wbt = s["decode_weight_bytes_per_token"]
    print(f"  {'decode weight bytes/tok':24} {'-' if wbt is None else f'{wbt / 1e6:.1f} MB':>10}   (from ds4-bench)")
    for label, key, where in (("decode weight GB/s ours", "ours_decode_weight_pct_of_read", "measured in its run"),
                              ("decode weight GB/s llama", "llama_decode_weight_pct_of_read", "probed after its run")):
        v = s[f"{label.split()[-1]}_decode_weight_gbps"]
        p = s[key]
        runs_p = " ".join(f"{x:.0f}" for x in s[key + "_runs"])
        print(f"  {label:24} {fmt(v):>10}   " +
              ("" if p is None else f"{p:.0f} % of the read bandwidth {where} (median of rounds: {runs_p})"))
    p = s["ours_decode_weight_pct_of_probe_after"]
    if p is not None:
        runs_p = " ".join(f"{x:.0f}" for x in s["ours_decode_weight_pct_of_probe_after_runs"])
        print(f"  {'':24} {'':>10}   ours: {p:.0f} % of the probe after llama.cpp's run (median of rounds: {runs_p})")
    probe = m["bandwidth"][0]
    in_run = s["ours_read_bandwidth_runs_gbps"]
    if all(v is not None for v in in_run):
        print(f"  {'read GB/s in our runs':24} {statistics.median(in_run):10.2f}   " + " ".join(fmt(v) for v in in_run))
    print(f"  {'read GB/s after llama':24} {s['read_bandwidth_median_gbps']:10.2f}   " +
          " ".join(fmt(v) for v in s["read_bandwidth_runs_gbps"]) +
          f"  (max {s['read_bandwidth_max_gbps']:.2f}; {probe['threads']} threads, {probe['bytes'] / 2**30:.1f} GiB)")

if out_path:
    with open(out_path, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
EOF
