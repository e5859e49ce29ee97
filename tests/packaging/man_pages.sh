#!/usr/bin/env bash
# The man pages tell the truth about the binaries:
#   - every option a binary's --help prints is in its page;
#   - every option its page names is one the binary accepts (run with it,
#     the binary does not call it unknown);
#   - voltad.yaml(5) lists every key `voltad --config-reference` knows;
#   - voltad(8) and docs/OPERATIONS.md list every code of daemon/exit_codes.h;
#   - each page formats without a warning from groff, carries the binary's
#     version, and was rebuilt from its source (the .gz matches).
set -uo pipefail
bin=${VOLTAD_BIN_DIR:?}
build=${VOLTAD_BUILD_DIR:?}
man=$build/man
command -v groff >/dev/null || { echo "SKIP: no groff (scripts/install-deps.sh installs groff-base)"; exit 77; }
for page in voltad.8 voltactl.1 voltad-run.1 voltad-bench.1 voltad.yaml.5; do
  [[ -f $man/$page ]] || { echo "FAIL: $man/$page was not built (target voltad_man)"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The binaries run in an empty home so that nothing they do touches the user's.
export HOME=$tmp XDG_RUNTIME_DIR=$tmp
unset VOLTAD_SOCKET NOTIFY_SOCKET LISTEN_FDS
fails=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}

# Options in a help text: "--word" and "-x" where an option can start
# (line start, space, '[' or '|'). Placeholders such as -1 are not options.
options_in() { grep -oE -- '(^|[][ |,])--?[a-zA-Z][a-zA-Z0-9-]*' | sed -E 's/^[][ |,]//' | sort -u; }
# A page's text with roff's \- turned back into - (read from a file: grep -q
# on a pipe would end the writer early, a failure under pipefail).
for page in voltad.8 voltactl.1 voltad-run.1 voltad-bench.1; do sed 's/\\-/-/g' "$man/$page" >"$tmp/$page"; done
page_text() { cat "$tmp/$1"; }
mentions() {  # mentions PAGE OPTION
  grep -qE -- "(^|[^a-zA-Z0-9-])$2([^a-zA-Z0-9-]|$)" "$tmp/$1"
}

# --- Every option of --help is in the page.
help_of() {
  case $1 in
    voltad) "$bin/voltad" --help; "$bin/voltad" --plan --help 2>&1 ;;
    *) "$bin/$1" --help ;;
  esac
}
declare -A page_of=([voltad]=voltad.8 [voltactl]=voltactl.1 [voltad-run]=voltad-run.1 [voltad-bench]=voltad-bench.1)
for b in voltad voltactl voltad-run voltad-bench; do
  opts=$(help_of "$b" | options_in)
  check "$b --help prints options" test -n "$opts"
  missing=()
  for o in $opts; do mentions "${page_of[$b]}" "$o" || missing+=("$o"); done
  check "${page_of[$b]} names every option of $b --help${missing:+ (missing: ${missing[*]})}" \
    test ${#missing[@]} -eq 0
done

# --- Every option in a page is accepted by its binary. Each is tried with a
# dummy value in every place it could belong; "unknown" in all of them
# means the page documents an option that does not exist.
rejects() {  # rejects BINARY OPTION: true when every way of passing it is refused as unknown
  local b=$1 o=$2 out
  case $b in
    voltad) contexts=("" "--plan" "--print-placement") ;;
    voltactl) contexts=("" "generate" "chat" "bench") ;;
    *) contexts=("") ;;
  esac
  for c in "${contexts[@]}"; do
    if [[ $b == voltactl ]]; then
      out=$(timeout 10 "$bin/voltactl" --socket "$tmp/none.sock" $c "$o" 1 </dev/null 2>&1)
      [[ $c == "" && $o == --socket ]] && out=$(timeout 10 "$bin/voltactl" "$o" "$tmp/none.sock" status 2>&1)
    else
      out=$(timeout 10 "$bin/$b" $c "$o" "$tmp/none" </dev/null 2>&1)
    fi
    grep -qiE "unknown (argument|option) '?$o'?( |$|for)" <<<"$out" || return 1
  done
  return 0
}
for b in voltad voltactl voltad-run voltad-bench; do
  page="${page_of[$b]}"
  # The options the page documents: the item lines (.TP/.TQ, then a .B,
  # .BR or .BI line) of its OPTIONS and COMMANDS.
  opts=$(page_text "$page" | awk '/^\.(TP|TQ)$/ { item = 1; next } item && /^\.B[RI]? / { print } { item = 0 }' |
         grep -oE -- '(^|[ "])--?[a-z][a-z0-9-]*' | sed -E 's/^[ "]//' | sort -u)
  check "$page documents options" test -n "$opts"
  bad=()
  for o in $opts; do rejects "$b" "$o" && bad+=("$o"); done
  check "$b accepts every option $page documents${bad:+ (unknown: ${bad[*]})}" test ${#bad[@]} -eq 0
done

# --- voltad.yaml(5) has every key.
keys=$("$bin/voltad" --config-reference | grep -oE '^\| `[a-z_]+\.[a-z_]+`' | tr -d '|` ')
check "config reference lists keys" test "$(wc -w <<<"$keys")" -gt 20
sed -n '/^\.SH KEYS/,/^\.SH /p' "$man/voltad.yaml.5" >"$tmp/keys.5"
missing=()
for k in $keys; do grep -qxF ".B $k" "$tmp/keys.5" || missing+=("$k"); done
check "voltad.yaml.5 KEYS has every key${missing:+ (missing: ${missing[*]})}" test ${#missing[@]} -eq 0
check "voltad.yaml.5 KEYS has no key voltad does not know" \
  test "$(grep -cE '^\.B [a-z_]+\.[a-z_]+$' "$tmp/keys.5")" -eq "$(wc -w <<<"$keys")"

# --- Every exit code of daemon/exit_codes.h is in voltad(8) and in
# docs/OPERATIONS.md's table, by number and name.
src=${VOLTAD_SOURCE_DIR:?}
codes=$(sed -nE 's/^ *(kExit[A-Za-z]+) = ([0-9]+),.*/\1 \2/p' "$src/daemon/exit_codes.h")
check "exit_codes.h has exit codes" test "$(wc -l <<<"$codes")" -ge 10
sed -n '/^\.SH EXIT STATUS/,/^\.SH /p' "$man/voltad.8" >"$tmp/exit.8"
missing=()
while read -r name code; do
  grep -qxF ".B $code" "$tmp/exit.8" || missing+=("$code in voltad.8")
  grep -qE "^\| $code \| \`$name\` \|" "$src/docs/OPERATIONS.md" || missing+=("$code $name in OPERATIONS.md")
done <<<"$codes"
check "every exit code is documented${missing:+ (missing: ${missing[*]})}" test ${#missing[@]} -eq 0

# --- Format and version.
version=$("$bin/voltad" --version | awk '{print $2}')
for page in voltad.8 voltactl.1 voltad-run.1 voltad-bench.1 voltad.yaml.5; do
  warnings=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$man/$page" 2>&1)
  check "$page formats without warnings${warnings:+: $warnings}" test -z "$warnings"
  check "$page carries version $version" grep -q "^\.TH .*\"voltad $version\"" "$man/$page"
  check "$page.gz is $page" cmp -s <(gzip -dc "$man/$page.gz") "$man/$page"
done

((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }
echo "all man page checks passed"
