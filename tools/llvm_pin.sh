# shellcheck shell=bash
# Sourced by tools/check_format.sh and tools/check_tidy.sh: their output depends on the LLVM release,
# so both are pinned to Debian 12's (14). require_llvm_tool CHECK TOOL PACKAGE WHAT exits 77 (CTest:
# "Skipped") with the reason when TOOL is missing or of another release; WHAT names what is pinned.
readonly llvm_pinned_major=14

require_llvm_tool() {
  local check=$1 tool=$2 package=$3 what=$4 version
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$check: $tool not found (Debian: apt-get install $package; tools/install_deps.sh does)"
    exit 77
  fi
  # "Debian clang-format version 14.0.6" / "Debian LLVM version 14.0.6"
  version=$("$tool" --version | grep -o 'version [0-9]*' | head -1 | grep -o '[0-9]*$' || true)
  if [[ "$version" != "$llvm_pinned_major" ]]; then
    echo "$check: $tool is release ${version:-unknown}; $what is pinned to release $llvm_pinned_major"
    exit 77
  fi
}
