# SPDX-License-Identifier: LGPL-2.1-or-later
# own-mounts.sh (sourced first by a test that runs 'flush all'): 'flush all'
# acts on every network mount the process can see, so the test re-executes
# itself in a mount namespace of its own, where the machine's other network
# and FUSE mounts are detached: it acts on its own mounts only, and a hung
# mount of another process cannot stall it.
#   own_mounts "$0" "$@"
own_mounts() {
        if [ -z "${FCACHE_OWN_MOUNTS:-}" ]; then
                FCACHE_OWN_MOUNTS=1 exec unshare -m --propagation private "$@"
        fi
        awk '{ for (i = 7; $i != "-"; i++); print $5, $(i + 1) }' /proc/self/mountinfo |
        while read -r point type; do
                case $type in
                nfs*|cifs|smb3|afs|9p|ceph|fuse|fuse.*) umount -l "$(printf '%b' "$point")" 2>/dev/null ;;
                esac
        done
}
