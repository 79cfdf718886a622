#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# completion.sh: the bash completions of fcachectl and fcache-resolve (as
# installed to /usr/share/bash-completion/completions), run by bash-completion
# against fcached on the private bus: the command words, their next words,
# options, --output's columns, and the names of fcached's volumes for
# 'volume remove' (from fcachectl volume list --no-legend --output VOLUME).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
[ -r /usr/share/bash-completion/bash_completion ] || skip_all "bash-completion is not installed"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"
BINDIR=$(dirname "$FCACHECTL")

# comp FILE FUNCTION WORD...: the completions bash offers for the words (the last is
# the one being completed), one per line, sorted.
comp() {
        local file=$1 fn=$2; shift 2
        PATH=$BINDIR:$PATH bash -c '
                source /usr/share/bash-completion/bash_completion
                source "$1"; fn=$2; shift 2
                COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
                COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
                "$fn"
                printf "%s\n" "${COMPREPLY[@]}"' bash "$file" "$fn" "$@" | sort | tr '\n' ' '
}
ctl() { comp "$SRCDIR/cli/completion/fcachectl" _fcachectl fcachectl "$@"; }
res() { comp "$SRCDIR/cli/completion/fcache-resolve" _fcache_resolve fcache-resolve "$@"; }

V=$T/volumes.d
mkdir -p "$V" "$T/srv" "$T/mnt"
chmod 755 "$T/srv"
printf '[Volume]\nBacking=%s\nMountpoint=%s\nCacheDir=%s\nCacheSize=64M\n' "$T/srv" "$T/mnt" "$T/cache" \
        > "$V/lap.conf"
start_bus || exit 1
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "volume lap is mounted" wait_mounted "$T/mnt" "$T/cache"

expect "fcachectl: the first words" "$(ctl "")" = \
        "disconnect flush pin prefetch query reconnect set status sync unpin volume "
expect "fcachectl query: what to query" "$(ctl query "")" = \
        "cache cached conflicts dirty pinned reintegration state "
expect "fcachectl set cacheable: on or off" "$(ctl set cacheable "")" = "off on "
expect "fcachectl volume: list, add, remove" "$(ctl volume "")" = "add list remove "
expect "fcachectl volume remove: fcached's volume names" "$(ctl volume remove "")" = "lap "
expect "fcachectl volume add NAME: the keys" "$(ctl volume add x Me)" = "Metered= "
expect "fcachectl options" "$(ctl --no-l)" = "--no-legend "
expect "fcachectl --output: the columns" "$(ctl --output MOUNT)" = "MOUNTPOINT "
expect "fcachectl pin PATH: paths" "$(cd "$T" && ctl pin vol)" = "volumes.d "
expect "fcache-resolve: the commands" "$(res "")" = "edit keep-both list show take "
expect "fcache-resolve take: local or remote" "$(res take "")" = "local remote "
expect "fcache-resolve options" "$(res --no)" = "--no-ask-password "
check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached exits with status 0"
else not_ok "fcached exits with status 0"; tail -30 "$T/fcached.log" | diag; fi
finish
