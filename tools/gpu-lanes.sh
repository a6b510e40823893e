#!/usr/bin/env bash
# Run lanes from an offline bundle on a GPU host and leave their receipts (tar) and log under $OUT.
#   PATCHLANE_REPO_COMMIT=<sha> tools/gpu-lanes.sh dist/bundle.tar.xz LABEL run 05 --lane X [--lane Y]
# Several packs: call it once per `harness run`, with distinct LABELs; receipts go to $OUT/receipts-LABEL.tar
# (import them here with `harness receipts import`), the harness output to $OUT/LABEL.log.
set -u
bundle=$1 label=$2
shift 2
: "${PATCHLANE_REPO_COMMIT:?set it to the repository commit the copy was made from}"
: "${OUT:?}"
receipts=/tmp/receipts-$label
mkdir -p "$receipts"
start=$(date +%s)
python3 -m harness.bootstrap "$bundle" -- "$@" --receipts-dir "$receipts" --no-tracking > "$OUT/$label.log" 2>&1
rc=$?
tar -C "$receipts" -cf "$OUT/receipts-$label.tar" .
echo "== $label: exit $rc after $(( $(date +%s) - start )) s; last lines:"
grep -E "^(BUG_|FIX_|MEMORY_|EQUIVALENCE|CONTRACT|REGRESSION|SKIPPED|exit )|verdict|Error|error" "$OUT/$label.log" | tail -25
exit 0
