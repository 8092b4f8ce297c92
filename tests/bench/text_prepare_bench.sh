#!/usr/bin/env bash
# `data prepare --input` on a JSON Lines corpus: tokens/s with one encoding
# thread and with one per core, in alternating rounds; and the peak resident
# memory of the process on the corpus and on one four times its size, which
# must not grow with it (documents are streamed a batch at a time; a shard's
# buffer fills to its 16M tokens in both; the given tokenizer keeps
# SentencePiece's training, which holds up to 2M lines, out of it).
#   tests/bench/text_prepare_bench.sh [COPIES] [ROUNDS]   (defaults 10, 3)
# The corpus is the Brown corpus (data/corpus/brown, which
# deploy/install-deps.sh fetches) as plain text, one JSON line a document,
# COPIES and 4 x COPIES times over, zstd-compressed (Debian's zstd), in a
# scratch directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
copies=${1:-10}
rounds=${2:-3}
bazel build -c opt //worker:plateau-data
data=bazel-bin/worker/plateau-data
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$data" prepare --input data/corpus/brown --output "$scratch/brown" \
  --vocab 4096 >/dev/null
for scale in 1 4; do
  mkdir -p "$scratch/corpus-$scale"
  /usr/bin/python3 - data/corpus/brown "$((scale * copies))" \
    "$scratch/corpus-$scale/brown.jsonl" <<'PY'
import json, os, sys
source, copies, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
documents = []
for name in sorted(os.listdir(source)):
    if len(name) != 4 or not name[:2].isalpha():
        continue  # ca01..cr44, not README or CONTENTS
    with open(os.path.join(source, name)) as file:
        paragraphs = [" ".join(token.rsplit("/", 1)[0]
                               for token in line.split())
                      for line in file if line.strip()]
    documents.append("\n".join(paragraphs))
with open(path, "w") as out:
    for copy in range(copies):
        for document in documents:
            out.write(json.dumps({"text": document}) + "\n")
PY
  zstd -q --rm "$scratch/corpus-$scale/brown.jsonl"
done
echo "corpus bytes (zstd): $(du -b "$scratch"/corpus-1/*.zst | cut -f1)" \
  "and $(du -b "$scratch"/corpus-4/*.zst | cut -f1)"
prepare() {  # SCALE THREADS LABEL
  /usr/bin/time -f "%M KiB peak resident" "$data" prepare \
    --input "$scratch/corpus-$1" --output "$scratch/out" \
    --tokenizer "$scratch/brown/tokenizer.model" --threads "$2" \
    --overwrite 2>&1 | grep -v "^sentencepiece" | sed "s/^/$3: /"
}
for round in $(seq "$rounds"); do
  prepare 1 1 "round $round, 1 thread"
  prepare 1 0 "round $round, $(nproc) threads"
done
prepare 4 0 "4x the corpus, $(nproc) threads"
