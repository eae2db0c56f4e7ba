#!/usr/bin/env bash
# Downloads a DeepSeek V4 GGUF published for ds4/DwarfStar from Hugging Face
# (antirez/deepseek-v4-gguf) and, for main models, points ./ds4flash.gguf at
# it so that `ds4` and `make run` find it without -m.
#
#   ./download_model.sh TARGET [--token TOKEN] [--dir DIR] [--print-url]
#
# Interrupted downloads resume where they stopped: run the same command again.
# Files go to $DS4_GGUF_DIR (default ./gguf). A Hugging Face token comes from
# --token, $HF_TOKEN or ~/.cache/huggingface/token when one exists.
set -euo pipefail

readonly REPO="antirez/deepseek-v4-gguf"
BASE_URL="${DS4_HF_BASE_URL:-https://huggingface.co/${REPO}/resolve/main}"

usage() {
  cat <<'USAGE'
Usage: ./download_model.sh TARGET [--token TOKEN] [--dir DIR] [--print-url]

Targets (sizes on disk; RAM needed to run from memory):
  q2-imatrix      DeepSeek V4 Flash, 2-bit routed experts with importance matrix.
                  ~81 GB. Recommended for 96-128 GB machines.
  q2-q4-imatrix   Flash with 4-bit experts in layers 37-42, 2-bit elsewhere.
                  ~98 GB. Better quality on 128 GB machines.
  q4-imatrix      Flash, 4-bit routed experts with importance matrix.
                  ~153 GB. For 256 GB machines and larger.
  q2              Flash, 2-bit experts without importance matrix (older). ~81 GB.
  q4              Flash, 4-bit experts without importance matrix (older). ~153 GB.
  pro-q2-imatrix  DeepSeek V4 PRO, 2-bit experts. ~430 GB (512 GB machines).
  mtp             Multi-token-prediction head for speculative decoding. ~3.5 GB.
                  Does not replace ./ds4flash.gguf.

Options:
  --token TOKEN   Hugging Face access token (else $HF_TOKEN or the HF token cache).
  --dir DIR       Where to store the file (else $DS4_GGUF_DIR, else ./gguf).
  --print-url     Print the file's URL and local path, download nothing.

After a main model download, ./ds4flash.gguf links to it: run ./build/bin/ds4
(or `make run`) for a chat.
USAGE
}

die() { echo "download_model.sh: $*" >&2; exit 1; }

[ $# -ge 1 ] || { usage >&2; exit 1; }
target=$1
shift
case "$target" in
  -h|--help|help) usage; exit 0 ;;
esac

link=1
case "$target" in
  q2-imatrix)     file="DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf" ;;
  q2-q4-imatrix)  file="DeepSeek-V4-Flash-Layers37-42Q4KExperts-OtherExpertLayersIQ2XXSGateUp-Q2KDown-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-fixed.gguf" ;;
  q4-imatrix)     file="DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2-imatrix.gguf" ;;
  q2)             file="DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2.gguf" ;;
  q4)             file="DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2.gguf" ;;
  pro-q2-imatrix) file="DeepSeek-V4-Pro-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-Instruct-imatrix.gguf" ;;
  mtp)            file="DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf"; link=0 ;;
  *) usage >&2; die "unknown target '$target'" ;;
esac

token="${HF_TOKEN:-}"
dir="${DS4_GGUF_DIR:-gguf}"
print_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --token) [ $# -ge 2 ] || die "--token needs a value"; token=$2; shift ;;
    --dir) [ $# -ge 2 ] || die "--dir needs a value"; dir=$2; shift ;;
    --print-url) print_only=1 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
if [ -z "$token" ] && [ -s "${HOME:-/nonexistent}/.cache/huggingface/token" ]; then
  token=$(cat "$HOME/.cache/huggingface/token")
fi

url="${BASE_URL}/${file}"
out="${dir}/${file}"
if [ "$print_only" -eq 1 ]; then
  echo "$url"
  echo "$out"
  exit 0
fi

command -v curl >/dev/null || die "curl is required (apt-get install curl)"
mkdir -p "$dir"

if [ -s "$out" ]; then
  echo "already downloaded: $out"
else
  part="${out}.part"
  echo "downloading $file"
  echo "  from $url"
  echo "  to   $out (interrupt and re-run to resume)"
  auth=()
  [ -n "$token" ] && auth=(-H "Authorization: Bearer ${token}")
  # -C -: continue from the size of the partial file.
  curl -fL --retry 5 --retry-delay 5 -C - "${auth[@]}" -o "$part" "$url" ||
    die "download failed; run the same command again to resume from ${part}"
  magic=$(head -c 4 "$part")
  [ "$magic" = "GGUF" ] || die "${part} does not start with the GGUF magic; delete it and try again"
  mv "$part" "$out"
  echo "saved $out"
fi

if [ "$link" -eq 1 ]; then
  case "$out" in
    /*) abs="$out" ;;
    *) abs="$(pwd)/$out" ;;
  esac
  ln -sfn "$abs" ds4flash.gguf
  echo "./ds4flash.gguf -> $abs"
fi
