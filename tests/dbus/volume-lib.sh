# SPDX-License-Identifier: LGPL-2.1-or-later
# volume-lib.sh: what the dbus tests that run fcache volumes share (sourced
# after lib.sh): the views fcached starts are stopped and their mounts ($T/mnt,
# $T/mnt2, $T/mnt3) released on exit; waits for a mount and for a state.
[ -x "${FCACHE_VIEW:-}" ] || skip_all "FCACHE_VIEW is not set to the fcache-view binary"
[ -e /dev/fuse ] || skip_all "no /dev/fuse"

# volume_conf NAME [N [LINE...]]: $V/NAME.conf for a volume on $T/srvN,
# mounted on $T/mntN, cached in $T/cacheN (N empty or a number), with LINEs
# (KEY=VALUE) added.
volume_conf() {
        local name=$1 n=${2:-}
        shift $(($# < 2 ? $# : 2))
        printf '[Volume]\nBacking=%s\nMountpoint=%s\nCacheDir=%s\nCacheSize=64M\nReserve=8M\n' \
                "$T/srv$n" "$T/mnt$n" "$T/cache$n" > "$V/$name.conf"
        if [ $# -gt 0 ]; then printf '%s\n' "$@" >> "$V/$name.conf"; fi
}

stop_views() {
        local p
        for p in $(pgrep -f "^$FCACHE_VIEW --config $T/"); do kill "$p" 2>/dev/null; done
        for _ in $(seq 50); do [ -z "$(pgrep -f "^$FCACHE_VIEW --config $T/")" ] && break; sleep 0.1; done
        umount -l "$T/mnt" "$T/mnt2" "$T/mnt3" 2>/dev/null || true
}
trap 'stop_views; cleanup' EXIT
# wait_mounted MOUNTPOINT CACHEDIR: the view serves there and its control socket is up.
wait_mounted() { for _ in $(seq 200); do mountpoint -q "$1" && [ -S "$2/control.sock" ] && return 0; sleep 0.05; done; return 1; }
# vol_state: the state of the volume at $T/mnt as fcachectl reports it; wait_state STATE.
vol_state() { "$FCACHECTL" query state "$T/mnt/proj" 2>/dev/null | sed -n 's/^state[=: ]*//p' | head -1; }
wait_state() { for _ in $(seq 100); do [ "$(vol_state)" = "$1" ] && return 0; sleep 0.1; done; return 1; }
