#!/usr/bin/env bash
# Installs the llama.cpp reference (node-llama-cpp@3.21.1 = llama.cpp v0.4.0) into .reference/:
#   node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/  prebuilt CPU libraries (libllama, libggml*)
#   node_modules/node-llama-cpp/llama/                       the llama.cpp source snapshot as a git bundle
#   llama.cpp/                                               that bundle checked out (headers, model graphs)
# Only the two tarballs that matter are fetched with `npm pack` (no install scripts, no other
# platforms' binaries) and checked against pinned sha512 integrities. Idempotent: when the stamp and
# the file manifest still match it exits at once.
#
# Usage: scripts/reference-setup.sh [DIR]   (DIR defaults to <repo>/.reference)
set -euo pipefail

readonly VERSION="3.21.1"
readonly LLAMA_TAG="v0.4.0"
readonly LLAMA_COMMIT="80fb11ac73e66d89eae2c6a91d8a77428fa733ed"
# npm dist.integrity of each tarball; a registry serving anything else is refused.
readonly MAIN_SPEC="node-llama-cpp@${VERSION}"
readonly MAIN_TGZ="node-llama-cpp-${VERSION}.tgz"
readonly MAIN_SRI="sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg=="
readonly BINS_SPEC="@node-llama-cpp/linux-x64@${VERSION}"
readonly BINS_TGZ="node-llama-cpp-linux-x64-${VERSION}.tgz"
readonly BINS_SRI="sha512-Totj6RTDMGo3FoK2yNUaz/oGmZD0olAqTrRluFUWmu0kW2i9TOzHSW0OWCAiGkzRCVX0WsU2CyUQo/W2NYtdPA=="

die() { echo "reference-setup: $*" >&2; exit 1; }
say() { echo "reference-setup: $*"; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ref_dir="${1:-${repo_root}/.reference}"
mkdir -p "$ref_dir"
ref_dir="$(cd "$ref_dir" && pwd)"

readonly STAMP="$ref_dir/.installed"
readonly MANIFEST="$ref_dir/.manifest.sha256"
readonly STAMP_TEXT="node-llama-cpp ${VERSION} ${MAIN_SRI} ${BINS_SRI} llama.cpp ${LLAMA_TAG} ${LLAMA_COMMIT}"
readonly BINS_REL="node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
readonly BUNDLE_REL="node_modules/node-llama-cpp/llama/gitRelease.bundle"

# Files the runner build needs; their hashes form the manifest that proves an install intact.
key_files() {
  echo "$BINS_REL/libllama.v0.4.0.so"
  echo "$BINS_REL/libggml.v0.4.0.so"
  echo "$BINS_REL/libggml-base.so"
  (cd "$ref_dir" && ls "$BINS_REL"/libggml-cpu-*.so)
  echo "$BUNDLE_REL"
  echo "llama.cpp/include/llama.h"
  (cd "$ref_dir" && ls llama.cpp/ggml/include/*.h)
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" && -f "$MANIFEST" ]] &&
   (cd "$ref_dir" && sha256sum --check --quiet --strict "$MANIFEST" >/dev/null 2>&1); then
  say "llama.cpp reference ${LLAMA_TAG} (node-llama-cpp ${VERSION}) already installed in $ref_dir"
  exit 0
fi
rm -f "$STAMP" "$MANIFEST"

for tool in npm git tar openssl sha256sum base64; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed (run scripts/install-deps.sh)"
done

sri_of() { echo "sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

downloads="$ref_dir/downloads"
mkdir -p "$downloads"

# Reuse tarballs from an earlier run when their integrity still matches.
need_fetch=0
[[ -f "$downloads/$MAIN_TGZ" && "$(sri_of "$downloads/$MAIN_TGZ")" == "$MAIN_SRI" ]] || need_fetch=1
[[ -f "$downloads/$BINS_TGZ" && "$(sri_of "$downloads/$BINS_TGZ")" == "$BINS_SRI" ]] || need_fetch=1

if [[ $need_fetch == 1 ]]; then
  registry="$(npm config get registry 2>/dev/null || echo "the npm registry")"
  say "fetching $MAIN_SPEC and $BINS_SPEC from $registry"
  staging="$(mktemp -d "$downloads/.fetch.XXXXXX")"
  trap 'rm -rf "$staging"' EXIT
  if ! npm_log="$(cd "$staging" && npm pack "$MAIN_SPEC" "$BINS_SPEC" --ignore-scripts \
        --fetch-retries=2 --fetch-retry-mintimeout=2000 \
        --fetch-retry-maxtimeout=10000 --fetch-timeout=60000 --loglevel=error --pack-destination "$staging" 2>&1)"; then
    echo "$npm_log" | tail -n 5 >&2
    die "npm could not fetch $MAIN_SPEC / $BINS_SPEC from $registry; check network access to the registry (or set npm's registry/proxy config) and rerun"
  fi
  for pair in "$MAIN_TGZ:$MAIN_SRI" "$BINS_TGZ:$BINS_SRI"; do
    name="${pair%%:*}"; want="${pair#*:}"
    [[ -f "$staging/$name" ]] || die "npm pack did not produce $name"
    got="$(sri_of "$staging/$name")"
    [[ "$got" == "$want" ]] || die "$name integrity mismatch: got $got, pinned $want"
    mv -f "$staging/$name" "$downloads/$name"
  done
  rm -rf "$staging"
  trap - EXIT
fi

say "unpacking into $ref_dir"
rm -rf "$ref_dir/node_modules" "$ref_dir/llama.cpp"
bins_pkg="$ref_dir/node_modules/@node-llama-cpp/linux-x64"
main_pkg="$ref_dir/node_modules/node-llama-cpp"
mkdir -p "$bins_pkg" "$main_pkg"
tar -xzf "$downloads/$BINS_TGZ" -C "$bins_pkg" --strip-components=1 --no-same-owner
# Of the main package only the llama.cpp snapshot is needed, not the JS sources.
tar -xzf "$downloads/$MAIN_TGZ" -C "$main_pkg" --strip-components=1 --no-same-owner \
  package/package.json package/LICENSE package/llama/gitRelease.bundle package/llama/llama.cpp.info.json

[[ -f "$ref_dir/$BINS_REL/libllama.v0.4.0.so" ]] || die "$BINS_TGZ has no $BINS_REL/libllama.v0.4.0.so"
grep -q "\"$LLAMA_TAG\"" "$main_pkg/llama/llama.cpp.info.json" ||
  die "$MAIN_TGZ does not carry llama.cpp $LLAMA_TAG"

say "checking out the llama.cpp $LLAMA_TAG source snapshot"
git -c advice.detachedHead=false clone --quiet "$ref_dir/$BUNDLE_REL" "$ref_dir/llama.cpp" ||
  die "could not clone $BUNDLE_REL"
head="$(git -C "$ref_dir/llama.cpp" rev-parse HEAD)"
[[ "$head" == "$LLAMA_COMMIT" ]] || die "bundle HEAD is $head, expected $LLAMA_COMMIT"

(cd "$ref_dir" && key_files | xargs sha256sum) > "$MANIFEST"
echo "$STAMP_TEXT" > "$STAMP"
say "installed llama.cpp reference ${LLAMA_TAG} (node-llama-cpp ${VERSION}) in $ref_dir"
