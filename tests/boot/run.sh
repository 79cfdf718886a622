#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# run.sh: the real-boot test.  Boots a Debian 12 guest (systemd as PID 1) from a
# cached debootstrap image (mkimage.sh) with the host's kernel under qemu (TCG),
# three times in one qemu run (the guest reboots itself), and reports the guest
# test's TAP lines (guest/test.sh, run by a systemd unit in the guest).
#
#   run.sh [--tap] --ko FCACHE.KO [--debs DIR] [--timeout SECONDS] [--keep DIR]
#
# --debs: a directory with the fcache and libfcachectl0 .deb files; without it
# they are built (tests/packaging/mkdebs.sh).  FCACHE.KO is installed in the guest
# prebuilt (DKMS in a TCG guest would compile for minutes), where fcache-dkms
# would put it, with fcache-dkms's modules-load.d file.  The guest writes to a
# temporary snapshot of the image (snapshot=on: the cached image stays as built;
# the guest's writes last for the qemu process, so across its reboots) and to a second
# disk, read back with debugfs: no mount on the host.
# Skips (77, or "1..0 # SKIP" with --tap) only without qemu or a kernel image.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tap=0 ko= debs= timeout=${FCACHE_BOOT_TIMEOUT:-1500} keep=
while [ $# -gt 0 ]; do
	case $1 in
	--tap) tap=1 ;;
	--ko) ko=$2; shift ;;
	--debs) debs=$2; shift ;;
	--timeout) timeout=$2; shift ;;
	--keep) keep=$2; shift ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
skip() {
	[ $tap = 1 ] && { echo "1..0 # SKIP $*"; exit 0; }
	echo "SKIP: $*"; exit 77
}
qemu=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 is not installed"
# the kernel booted is the one the module is built for
kver=${FCACHE_VM_KVER:-}
[ -z "$kver" ] && [ -f "$ko" ] && kver=$(modinfo -F vermagic "$ko" | cut -d' ' -f1)
[ -n "$kver" ] && [ -r "/boot/vmlinuz-$kver" ] && [ -e "/lib/modules/$kver/modules.dep.bin" ] ||
	skip "no readable /boot/vmlinuz-$kver with its /lib/modules (install linux-image-amd64)"
n=0 failed=0 todo=0
report() { n=$((n + 1)); if [ "$1" = ok ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
bail() { report fail "$*"; echo "1..$n"; [ $tap = 1 ] && exit 0; exit 1; }
[ -n "$ko" ] && [ -f "$ko" ] || bail "--ko $ko: no module"
modinfo -F vermagic "$ko" | grep -q "^$kver " || bail "$ko is not built for $kver"

res=$(mktemp -d /var/tmp/fcache-boot.XXXXXX)
trap '[ -n "$keep" ] && cp -a "$res/." "$keep/"; rm -rf "$res"' EXIT
t0=$(date +%s)
img=$("$here/mkimage.sh" "$kver" 2>"$res/mkimage.log") || { sed 's/^/# /' "$res/mkimage.log"; bail "the guest image (mkimage.sh)"; }
report ok "guest image $img ($(( $(date +%s) - t0 )) s)"

if [ -z "$debs" ]; then
	t1=$(date +%s)
	debs=$res/debs
	mkdir -p "$debs"
	"$top/tests/packaging/mkdebs.sh" "$debs" || { tail -30 "$debs/build.log" | sed 's/^/# /'; bail "dpkg-buildpackage"; }
	report ok "packages built ($(( $(date +%s) - t1 )) s)"
fi
x=$res/xfer
mkdir -p "$x/debs"
cp "$debs"/fcache_*.deb "$debs"/libfcachectl0_*.deb "$x/debs/" || bail "no fcache/libfcachectl0 .deb in $debs"
cp "$ko" "$x/fcache.ko"
cp "$top/units/modules-load.d/fcache.conf" "$x/modules-load.conf"
cp "$here/guest/test.sh" "$x/test.sh"
mkfs.ext4 -q -F -L fcache-xfer -d "$x" "$res/xfer.img" 256M >/dev/null || bail "mkfs.ext4 of the exchange disk"
"$top/tests/vm/mkinitramfs.sh" "$res/initrd.gz" "$kver" "$here/init" \
	virtio_pci virtio_blk crc32c_generic ext4 || bail "initramfs"

start=$(date +%s)
timeout -k 10 "$timeout" nice "$qemu" -accel tcg,thread=multi -cpu max -m 2048 -smp 2 \
	-nographic -nic none -kernel "/boot/vmlinuz-$kver" -initrd "$res/initrd.gz" \
	-append "root=/dev/vda console=ttyS0 loglevel=4 panic=-1 watchdog_thresh=60 rcupdate.rcu_cpu_stall_timeout=300 systemd.show_status=error" \
	-drive file="$img",if=virtio,format=raw,snapshot=on \
	-drive file="$res/xfer.img",if=virtio,format=raw \
	</dev/null >"$res/console.log" 2>&1
qrc=$?
secs=$(( $(date +%s) - start ))

for f in tap done journal-1.txt journal-2.txt journal-3.txt dmesg-1.txt dmesg-2.txt dmesg-3.txt; do
	debugfs -R "dump /$f $res/$f" "$res/xfer.img" >/dev/null 2>&1
	[ -s "$res/$f" ] || rm -f "$res/$f"
done
[ -f "$res/tap" ] || grep -aE '^(ok|not ok) - boot ' "$res/console.log" > "$res/tap"
while IFS= read -r line; do
	case $line in
	"ok - "*) report ok "${line#ok - }" ;;
	"not ok - "*"# TODO"*) n=$((n + 1)); todo=$((todo + 1)); echo "not ok $n - ${line#not ok - }" ;;
	"not ok - "*) report fail "${line#not ok - }" ;;
	"#"*) echo "$line" ;;
	esac
done < "$res/tap"
if [ -f "$res/done" ]; then
	report ok "the guest went through its three boots and powered off ($secs s, qemu exit $qrc)"
else
	report fail "the guest did not finish (qemu exit $qrc after $secs s)"
fi
bad=$(cat "$res"/dmesg-*.txt 2>/dev/null | grep -E 'WARNING:|BUG:|Oops|general protection|Call Trace|refcount_t:|UBSAN|list_(add|del) corruption|INFO: task .* blocked')
[ -z "$bad" ] && report ok "the guest's dmesg has no WARN, BUG or oops" ||
	{ report fail "the guest's dmesg shows a kernel problem"; echo "$bad" | head -30 | sed 's/^/# /'; }
echo "1..$n"
if [ $failed -gt 0 ]; then
	echo "# ---- console (last 60 lines) ----"
	tail -n 60 "$res/console.log" | sed 's/^/# /'
fi
echo "# $((n - failed - todo)) passed, $failed failed, $todo known failures (TODO) ($secs s in the VM, $(( $(date +%s) - t0 )) s in all)"
[ $tap = 1 ] && exit 0
[ $failed -eq 0 ]
