#!/bin/sh
# Writes voltad.yaml(5): the hand-written TEMPLATE with its @KEYS@ line
# replaced by every key, from `voltad --config-reference` -- the Markdown
# that docs/CONFIG.md is, generated from the declarations in daemon/config.h.
# So the man page lists exactly the keys the binary knows.
#
#   gen-config-man.sh VOLTAD TEMPLATE VERSION OUT
#
# The Markdown it reads: "## `section`", a line describing the section, then
# a table "| `key` | type | `default` | allowed | what it does |".
set -eu
voltad=$1 template=$2 version=$3 out=$4

"$voltad" --config-reference >"$out.md"
awk '
  # Roff: a backslash is \e; code (between backticks) is bold, and its
  # hyphens are \- so that they can be copied and searched for.
  function roff(s,    n, parts, i, r, code) {
    gsub(/\\/, "\\e", s)
    n = split(s, parts, "`")
    r = ""
    for (i = 1; i <= n; i++) {
      if (i % 2 == 0) { code = parts[i]; gsub(/-/, "\\-", code); r = r "\\fB" code "\\fR" }
      else r = r parts[i]
    }
    if (r ~ /^[.\047]/) r = "\\&" r
    return r
  }
  function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
  /^## `/ { s = $0; sub(/^## `/, "", s); sub(/`.*/, "", s); print ".SS " s; section = 1; next }
  section == 1 && /^[A-Za-z]/ { print roff($0); section = 2; next }
  /^\| `/ {
    n = split($0, c, "|")
    key = trim(c[2]); type = trim(c[3]); def = trim(c[4]); allowed = trim(c[5]); what = trim(c[6])
    gsub(/`/, "", key); gsub(/-/, "\\-", key)
    if (def == "`\"\"`") def = "default empty"
    else if (def == "`[]`") def = "default empty"
    else if (def != "required") def = "default " roff(def)
    line = roff(type) ", " def
    if (allowed != "") line = line "; " roff(allowed)
    print ".TP"
    print ".B " key
    print line "."
    print ".br"
    print roff(what)
    keys++
  }
  END { if (keys == 0) { print "gen-config-man: no keys in the reference" > "/dev/stderr"; exit 1 } }
' "$out.md" >"$out.keys"
rm -f "$out.md"

# The template, with @VERSION@ filled in and @KEYS@ replaced by the list.
awk -v version="$version" -v keys="$out.keys" '
  /^@KEYS@$/ { while ((getline line < keys) > 0) print line; next }
  { gsub(/@VERSION@/, version); print }
' "$template" >"$out"
rm -f "$out.keys"
