# Sourced by the end-to-end scripts of tests/e2e: the shell side of tests/support/real_data.h (the same
# dataset names, places and QTRAIN_REQUIRE_DATA rule).

# The folder of the shared real data: $QTRAIN_SHARED_DATA, else ../shared/data beside the checkout $1
# (or beside its folder of worktrees).
shared_data_dir() {
  if [[ -n "${QTRAIN_SHARED_DATA:-}" ]]; then echo "$QTRAIN_SHARED_DATA"
  elif [[ -d "$1/../shared/data" || ! -d "$1/../../shared/data" ]]; then echo "$1/../shared/data"
  else echo "$1/../../shared/data"; fi
}

# data_required NAME: whether QTRAIN_REQUIRE_DATA (comma-separated names, or "all") names it.
data_required() {
  [[ ",${QTRAIN_REQUIRE_DATA:-}," == *",$1,"* || ",${QTRAIN_REQUIRE_DATA:-}," == *",all,"* ]]
}

# data_absent NAME PATH HINT [WHAT]: reports that dataset NAME is not at PATH and WHAT is left out;
# where the dataset is required that is a misconfiguration, and the script fails (exit 1) on the spot.
data_absent() {
  if data_required "$1"; then
    echo "FAILED: $1 is absent from $2, and QTRAIN_REQUIRE_DATA requires it ($3)"; exit 1
  fi
  echo "skipped${4:+ $4}: $1 is absent from $2 ($3)"
}

# skip_without_data NAME PATH HINT: for a script that needs the dataset throughout: exits 77 (CTest:
# "Skipped") without it, or 1 where it is required.
skip_without_data() {
  if data_required "$1"; then
    echo "FAILED: $1 is absent from $2, and QTRAIN_REQUIRE_DATA requires it ($3)"; exit 1
  fi
  echo "SKIPPED: $1 is absent from $2 ($3)"; exit 77
}

mnist_hint="tools/fetch_mnist.sh fetches it; tools/test.sh does so"
