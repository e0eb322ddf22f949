#!/usr/bin/env bash
# compare_sass.sh: whether two builds of the CUDA kernels generate the same GPU code, kernel by
# kernel: the SASS (instructions and their encodings), the resource usage (registers, stack,
# shared, local and constant memory) and the kernel attributes of the cubin (.nv.info: launch
# bounds, parameters, barriers, exit offsets, ...). For reorganisations of the sources (files
# split or merged, namespaces renamed) that must change no generated code.
#
# Usage:
#   cuda/tools/compare_sass.sh [options] OLD NEW
# OLD and NEW are each either a folder of .cubin files, or a list of .cu files (one argument,
# separated by spaces or commas) compiled here to cubins, each file on its own, with nvcc:
#   -cubin -arch=ARCH -std=c++17 -O3 --expt-relaxed-constexpr -DDSAMPLER_HAVE_WGMMA=1 -DNDEBUG
#   -I src/shared -I cuda -I cuda/check (of this repository) and MPI's include folders (mpicc --showme:incdirs),
# plus --fmad=false for the files of cuda/hmc/ and for hmc_kernels.cu, as cuda/CMakeLists.txt.
#
# Options:
#   -a ARCH      the target (default sm_90a)
#   -f FLAGS     more nvcc flags for every file (one argument, split on spaces)
#   -x GLOB=FL   more nvcc flags FL for the files whose path matches GLOB (repeatable)
#   -I DIR       one more include folder (repeatable)
#   -s PREFIX    one more name prefix to strip before names are compared (repeatable); always
#                stripped: "(anonymous namespace)::", "dsampler_svgd::", "dsampler_hmc::"
#   -j N         compile N files at once (default 2)
#   -e           ignore the instructions' encodings (compare the instruction text only)
#   -r           accept a difference of sm_90's reserved shared memory alone (see below)
#   -w DIR       work folder (kept); default a temporary one, removed at the end
#   -v           print every function, not only those that differ
#
# Names are demangled (cu++filt, else c++filt) and the prefixes above removed wherever they occur
# (a function's name and its parameters' types alike), so a kernel moved from an anonymous
# namespace into a named one is matched with itself. Addresses inside a function are dropped;
# instruction text, encodings, resources and attributes must match exactly (the attributes less
# the symbol index of EIATTR_PARAM_CBANK, which numbers the cubin's sections). Every function of
# OLD must be in NEW and none other; a name found twice on one side is an error.
#
# RESERVED-SMEM marks a function whose SASS and attributes match and whose resources differ only
# in SHARED, 0 on one side and 1024 on the other: for sm_90, ptxas counts the 1 KB of shared
# memory the system reserves a block in every kernel of a cubin in which some kernel uses dynamic
# shared memory (extern __shared__), and in no kernel of a cubin in which none does, so a kernel
# without shared memory of its own changes SHARED when it moves between files. With -r these
# count as identical (and are still listed).
#
# Needs nvcc for .cu lists, cuobjdump and nvdisasm (CUDA toolkit; or, from PyPI,
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, whose bin folder must then be on PATH or named
# by CUOBJDUMP and NVDISASM_PATH). Exit status: 0 when everything matches, 1 when something
# differs, 2 on a usage or tool error.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ARCH=sm_90a
EXTRA_FLAGS=""
FILE_FLAGS=("*/hmc/*.cu=--fmad=false" "*hmc_kernels.cu=--fmad=false")
INCLUDES=("$ROOT/src/shared" "$ROOT/cuda" "$ROOT/cuda/check")
STRIP=("(anonymous namespace)::" "dsampler_svgd::" "dsampler_hmc::")
JOBS=2
NO_ENCODING=0
ACCEPT_RESERVED=0
WORK=""
VERBOSE=0

die() { echo "compare_sass: $*" >&2; exit 2; }

while getopts "a:f:x:I:s:j:erw:vh" opt; do
  case $opt in
    a) ARCH=$OPTARG ;;
    f) EXTRA_FLAGS=$OPTARG ;;
    x) FILE_FLAGS+=("$OPTARG") ;;
    I) INCLUDES+=("$OPTARG") ;;
    s) STRIP+=("$OPTARG") ;;
    j) JOBS=$OPTARG ;;
    e) NO_ENCODING=1 ;;
    r) ACCEPT_RESERVED=1 ;;
    w) WORK=$OPTARG ;;
    v) VERBOSE=1 ;;
    h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option (-h for help)" ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || die "two arguments expected, OLD and NEW (-h for help)"

CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || echo "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump")}
[ -x "$CUOBJDUMP" ] || die "cuobjdump not found (set CUOBJDUMP, or pip install nvidia-cuda-cuobjdump)"
if [ -z "${NVDISASM_PATH:-}" ] && ! command -v nvdisasm >/dev/null; then
  [ -x "$(dirname "$CUOBJDUMP")/nvdisasm" ] && export NVDISASM_PATH=$(dirname "$CUOBJDUMP") ||
    die "nvdisasm not found (put it on PATH or set NVDISASM_PATH; pip install nvidia-cuda-nvdisasm)"
fi
DEMANGLE=$(command -v cu++filt || command -v c++filt || true)
[ -n "$DEMANGLE" ] || die "neither cu++filt nor c++filt found"

if [ -z "$WORK" ]; then
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/compare_sass.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"

if command -v mpicc >/dev/null && mpicc --showme:incdirs >/dev/null 2>&1; then
  for d in $(mpicc --showme:incdirs); do INCLUDES+=("$d"); done
fi

# compile SIDE FILE...: each .cu into $WORK/SIDE/cubin/NN_name.cubin
compile() {
  local side=$1; shift
  local out="$WORK/$side/cubin" i=0 f
  mkdir -p "$out"
  local base=(-cubin "-arch=$ARCH" -std=c++17 -O3 --expt-relaxed-constexpr -DDSAMPLER_HAVE_WGMMA=1 -DNDEBUG)
  local inc=() d
  for d in "${INCLUDES[@]}"; do inc+=("-I$d"); done
  local pids=() names=()
  for f in "$@"; do
    [ -f "$f" ] || die "$side: no file $f"
    local abs rule flags=()
    abs=$(cd "$(dirname "$f")" && pwd)/$(basename "$f")
    for rule in "${FILE_FLAGS[@]}"; do
      # shellcheck disable=SC2254
      case $abs in ${rule%%=*}) read -r -a more <<<"${rule#*=}"; flags+=("${more[@]}") ;; esac
    done
    read -r -a more <<<"$EXTRA_FLAGS"
    flags+=("${more[@]+"${more[@]}"}")
    i=$((i + 1))
    local cubin
    cubin=$out/$(printf '%02d' $i)_$(basename "$f" .cu).cubin
    echo "compare_sass: $side: nvcc ${flags[*]+"${flags[*]}"} $f" >&2
    nvcc "${base[@]}" "${inc[@]}" ${flags[@]+"${flags[@]}"} -o "$cubin" "$abs" >"$cubin.log" 2>&1 &
    pids+=($!)
    names+=("$f")
    if [ ${#pids[@]} -ge "$JOBS" ]; then
      wait "${pids[0]}" || { cat "$out"/*.log >&2; die "$side: nvcc failed on ${names[0]}"; }
      pids=("${pids[@]:1}")
      names=("${names[@]:1}")
    fi
  done
  local k
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}" || { cat "$out"/*.log >&2; die "$side: nvcc failed on ${names[$k]}"; }
  done
}

# Names demangled, with the prefixes in STRIP removed; section names split from their prefixes
# first (c++filt reads a word with dots in it as one name).
normalise_names() {
  sed -e 's/^\.nv\.info\./.nv.info /' | "$DEMANGLE" | awk -v strip="$(printf '%s\n' "${STRIP[@]}")" '
    BEGIN { n = split(strip, s, "\n") }
    { for (k = 1; k <= n; ++k) if (s[k] != "") while ((i = index($0, s[k])) > 0) $0 = substr($0, 1, i - 1) substr($0, i + length(s[k])); print }'
}

# extract SIDE: the cubins of $WORK/SIDE/cubin into one folder of per-function files
# ($WORK/SIDE/fn/NNNN.{sass,res,info}) and the table $WORK/SIDE/names (number TAB name TAB cubin).
extract() {
  local side=$1 dir=$WORK/$side n=0 cubin
  mkdir -p "$dir/fn"
  : >"$dir/names"
  for cubin in "$dir"/cubin/*.cubin; do
    [ -f "$cubin" ] || die "$side: no .cubin files"
    "$CUOBJDUMP" -sass "$cubin" | normalise_names >"$dir/sass.txt" || die "$side: cuobjdump -sass failed on $cubin"
    "$CUOBJDUMP" -res-usage "$cubin" | normalise_names >"$dir/res.txt" || die "$side: cuobjdump -res-usage failed on $cubin"
    "$CUOBJDUMP" -elf "$cubin" | normalise_names >"$dir/elf.txt" || die "$side: cuobjdump -elf failed on $cubin"
    n=$(awk -v dir="$dir/fn" -v first="$n" -v cubin="$(basename "$cubin")" -v noenc="$NO_ENCODING" \
            -v names="$dir/names" -v res="$dir/res.txt" -v elf="$dir/elf.txt" '
      function flush() { if (cur != "") close(cur) }
      FNR == 1 { file = FILENAME == ARGV[1] ? 1 : FILENAME == ARGV[2] ? 2 : 3 }
      # the SASS: a function starts at "Function : NAME"
      file == 1 && /^[ \t]*Function : / {
        flush(); name = $0; sub(/^[ \t]*Function : /, "", name)
        num++; id = sprintf("%04d", first + num); cur = dir "/" id ".sass"
        printf "%s\t%s\t%s\n", id, name, cubin >> names; byname[name] = id; printf "" > cur; next }
      file == 1 && cur != "" {
        line = $0
        if (line ~ /^[ \t]*\.(headerflags|target)/ || line ~ /code for sm_/ || line ~ /^[ \t.]*$/) next
        sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line)
        if (noenc) gsub(/\/\* 0x[0-9a-f]+ \*\//, "", line)
        gsub(/[ \t]+/, " ", line); sub(/^ /, "", line); sub(/ $/, "", line)
        if (line != "") print line > cur
        next }
      # the resource usage: " Function NAME:" then its values
      file == 2 && /^ Function / { rname = $0; sub(/^ Function /, "", rname); sub(/:$/, "", rname); next }
      file == 2 && rname != "" && /REG:/ {
        if (rname in byname) { f = dir "/" byname[rname] ".res"; print $0 > f; close(f) }
        else print "compare_sass: resources of an unknown function: " rname > "/dev/stderr"
        rname = ""; next }
      # the attributes: the section ".nv.info NAME" up to the next section
      file == 3 && /^\./ { if (iname != "") close(inf); iname = ""; if ($0 ~ /^\.nv\.info /) {
        iname = substr($0, 10)
        if (iname in byname) { inf = dir "/" byname[iname] ".info"; printf "" > inf; pcb = 0 }
        else { print "compare_sass: attributes of an unknown function: " iname > "/dev/stderr"; iname = "" } }
        next }
      file == 3 && iname != "" {
        line = $0
        if (line ~ /EIATTR_PARAM_CBANK/) pcb = 1
        else if (pcb && line ~ /Value:/) { sub(/Value:[ \t]*0x[0-9a-f]+/, "Value: <section>", line); pcb = 0 }
        print line > inf; next }
      END { flush(); print first + num }
    ' "$dir/sass.txt" "$dir/res.txt" "$dir/elf.txt")
  done
  [ -s "$dir/names" ] || die "$side: no functions found"
}

for side in old new; do
  spec=$([ $side = old ] && echo "$1" || echo "$2")
  if [ -d "$spec" ]; then
    mkdir -p "$WORK/$side/cubin"
    found=0
    for c in "$spec"/*.cubin; do [ -f "$c" ] && cp "$c" "$WORK/$side/cubin/" && found=1; done
    [ $found = 1 ] || die "$side: no .cubin files in $spec"
  else
    read -r -a files <<<"${spec//,/ }"
    [ ${#files[@]} -gt 0 ] || die "$side: no files"
    compile $side "${files[@]}"
  fi
  extract $side
done

# same_file A B: both absent, or both present and equal.
same_file() {
  if [ -e "$1" ] && [ -e "$2" ]; then cmp -s "$1" "$2"; else [ ! -e "$1" ] && [ ! -e "$2" ]; fi
}

status=0
awk -F'\t' '{ print $2 }' "$WORK/old/names" | sort | uniq -d >"$WORK/dup_old"
awk -F'\t' '{ print $2 }' "$WORK/new/names" | sort | uniq -d >"$WORK/dup_new"
for side in old new; do
  if [ -s "$WORK/dup_$side" ]; then
    status=1
    sed "s/^/TWICE-IN-$(echo $side | tr a-z A-Z)  /" "$WORK/dup_$side"
  fi
done

n_old=$(wc -l <"$WORK/old/names")
n_new=$(wc -l <"$WORK/new/names")
same=0 differ=0 reserved=0 only_old=0 only_new=0
while IFS=$'\t' read -r id name cubin; do
  new_id=$(awk -F'\t' -v n="$name" '$2 == n { print $1; exit }' "$WORK/new/names")
  if [ -z "$new_id" ]; then
    echo "ONLY-IN-OLD  $name  ($cubin)"
    only_old=$((only_old + 1)); status=1; continue
  fi
  old_fn=$WORK/old/fn/$id new_fn=$WORK/new/fn/$new_id
  what=""
  same_file "$old_fn.sass" "$new_fn.sass" || what="$what sass"
  same_file "$old_fn.info" "$new_fn.info" || what="$what attributes"
  res_same=1
  same_file "$old_fn.res" "$new_fn.res" || res_same=0
  if [ -z "$what" ] && [ $res_same = 0 ] && [ -e "$old_fn.res" ] && [ -e "$new_fn.res" ] &&
     awk 'FNR == 1 { side++ } { for (i = 1; i <= NF; ++i) { split($i, kv, ":"); v[side, kv[1]] = kv[2]; k[kv[1]] = 1 } }
          END { for (f in k) if (f != "SHARED" && v[1, f] != v[2, f]) exit 1
                a = v[1, "SHARED"] + 0; b = v[2, "SHARED"] + 0
                exit !((a == 0 && b == 1024) || (a == 1024 && b == 0)) }' "$old_fn.res" "$new_fn.res"; then
    echo "RESERVED-SMEM  $name  (SHARED $(grep -o 'SHARED:[0-9]*' "$old_fn.res" | cut -d: -f2) -> $(grep -o 'SHARED:[0-9]*' "$new_fn.res" | cut -d: -f2))"
    reserved=$((reserved + 1))
    [ $ACCEPT_RESERVED = 1 ] || status=1
    continue
  fi
  [ $res_same = 1 ] || what="$what resources"
  if [ -n "$what" ]; then
    echo "DIFFERS($what )  $name"
    diff "$old_fn.sass" "$new_fn.sass" | head -20 | sed 's/^/    /' || true
    [ $res_same = 1 ] || { sed 's/^ */    old: /' "$old_fn.res" 2>/dev/null; sed 's/^ */    new: /' "$new_fn.res" 2>/dev/null; }
    differ=$((differ + 1)); status=1
  else
    [ $VERBOSE = 1 ] && echo "same  $name  ($(wc -l <"$old_fn.sass") lines)"
    same=$((same + 1))
  fi
done <"$WORK/old/names"
while IFS=$'\t' read -r id name cubin; do
  if ! awk -F'\t' -v n="$name" '$2 == n { found = 1 } END { exit !found }' "$WORK/old/names"; then
    echo "ONLY-IN-NEW  $name  ($cubin)"
    only_new=$((only_new + 1)); status=1
  fi
done <"$WORK/new/names"

what="SASS$([ $NO_ENCODING = 1 ] && echo ' text' || echo ' and encodings'), resources, attributes"
echo "compare_sass: OLD $n_old functions ($(ls "$WORK/old/cubin"/*.cubin | wc -l) cubins), NEW $n_new functions ($(ls "$WORK/new/cubin"/*.cubin | wc -l) cubins), $ARCH"
echo "compare_sass: $same identical ($what), $reserved differ in reserved shared memory alone (RESERVED-SMEM), $differ differ otherwise, $only_old only in OLD, $only_new only in NEW"
if [ $status = 0 ]; then
  echo "compare_sass: IDENTICAL$([ $reserved -gt 0 ] && echo " (with $reserved RESERVED-SMEM, accepted by -r)")"
else
  echo "compare_sass: NOT IDENTICAL"
fi
exit $status
