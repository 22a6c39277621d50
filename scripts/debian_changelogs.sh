# debian_changelogs.sh — sourced by prepare_long_documents.sh and prepare_other_corpus.sh, the two
# corpora made of the Debian changelogs installed here: what they check before any work, and the
# list of changelogs they read.
#
# changelogs_start SCRIPT DIR: refuses an existing DIR and a missing binary, one line naming
# SCRIPT each; sets BIN (FLASHGPT, else build/flashgpt) and logs (every
# /usr/share/doc/*/changelog.Debian.gz that is a file or a link to one, in package-name order:
# a link whose package is gone would give an empty document, which prepare refuses).
changelogs_start() {
  local script=$1 dir=$2
  if [ -e "$dir" ]; then
    echo "$script: $dir exists and was not made by this script; name a new directory" >&2
    exit 1
  fi
  BIN=${FLASHGPT:-build/flashgpt}
  [ -x "$BIN" ] || { echo "$script: $BIN is missing; run make first" >&2; exit 1; }
  mapfile -t logs < <(LC_ALL=C find /usr/share/doc -mindepth 2 -maxdepth 2 \
                        -name changelog.Debian.gz -xtype f 2>/dev/null | LC_ALL=C sort)
}
