#!/bin/bash
# The Python module is a user of drover's public C++ API (include/drover/, mainly
# drover/by_name.h), like any binding: it names nothing in drover::internal and
# includes no header of the tree beyond drover/, its own python/ and Abseil. A change
# that needs more extends the public API instead (docs/architecture.md, "By name").
set -u
status=0
files=("$@")
if [ "${#files[@]}" -eq 0 ]; then
  echo "no files given" >&2
  exit 1
fi
for f in "${files[@]}"; do
  if grep -n 'internal::' "$f"; then
    echo "$f: names drover::internal (use drover/by_name.h, or extend it)" >&2
    status=1
  fi
  # Quoted includes are the tree's headers (and Abseil's): only drover/, python/, absl/.
  if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$f" | grep -vE '#[[:space:]]*include[[:space:]]+"(drover|python|absl)/'; then
    echo "$f: includes a header outside drover/, python/ and absl/" >&2
    status=1
  fi
  if grep -nE '#[[:space:]]*include[[:space:]]+"drover/internal/' "$f"; then
    echo "$f: includes drover/internal/ (internal to the SDK's templates)" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "checked ${#files[@]} files: public API only"
exit "$status"
