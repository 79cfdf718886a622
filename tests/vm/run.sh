#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run.sh: boot Debian's kernel in qemu (TCG), run the fcache.ko guest tests
# and report their results.
#
#   run.sh [--tap] --ko FCACHE.KO --fcnl FCNL [--fcachectl FCACHECTL]
#          [--view FCACHE-VIEW] [--fcached FCACHED] [--guest SCRIPT] [--bench N] [--timeout SECONDS] [--keep DIR]
#
# The guest sees this machine's / read-only over 9p (so the build
# directory too) and writes its TAP lines, dmesg and logs to a second,
# writable 9p share.  Missing qemu or kernel image: skip (exit 77, or a TAP
# "1..0 # SKIP" with --tap, as meson's TAP protocol wants).  Any not-ok
# line, a missing result, or a WARN/BUG/oops/leak report in the guest's
# dmesg fails the run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tap=0 ko= fcnl= ctl= view= fcached= guest=$here/guest/main.sh bench=${FCACHE_VM_BENCH:-0}
timeout=${FCACHE_VM_TIMEOUT:-900} keep=
while [ $# -gt 0 ]; do
	case $1 in
	--tap) tap=1 ;;
	--ko) ko=$2; shift ;;
	--fcnl) fcnl=$2; shift ;;
	--fcachectl) ctl=$2; shift ;;
	--view) view=$2; shift ;;
	--fcached) fcached=$2; shift ;;
	--guest) guest=$2; shift ;;
	--bench) bench=$2; shift ;;
	--timeout) timeout=$2; shift ;;
	--keep) keep=$2; shift ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

skip() {
	if [ $tap = 1 ]; then
		echo "1..0 # SKIP $*"
		exit 0
	fi
	echo "SKIP: $*"
	exit 77
}

qemu=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 is not installed"
[ -n "$ko" ] && [ -f "$ko" ] || { echo "run.sh: --ko $ko: no module" >&2; exit 1; }
[ -n "$fcnl" ] && [ -x "$fcnl" ] || { echo "run.sh: --fcnl $fcnl: no client" >&2; exit 1; }
# the kernel booted is the one the module is built for (several may be
# installed: Debian's and a backports one)
kver=${FCACHE_VM_KVER:-$(modinfo -F vermagic "$ko" | cut -d' ' -f1)}
[ -n "$kver" ] && [ -r "/boot/vmlinuz-$kver" ] && [ -e "/lib/modules/$kver/modules.dep.bin" ] ||
	skip "no readable /boot/vmlinuz-$kver with its /lib/modules (install linux-image-amd64)"
modinfo -F vermagic "$ko" | grep -q "^$kver " ||
	{ echo "run.sh: $ko is not built for $kver" >&2; exit 1; }

abspath() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
# under /var/tmp: the guest reads env.sh there through its 9p view of /
# (the guest puts a tmpfs on /tmp)
res=$(mktemp -d /var/tmp/fcache-vm.XXXXXX)
trap '[ -n "$keep" ] && cp -a "$res/." "$keep/"; rm -rf "$res"' EXIT
"$here/mkinitramfs.sh" "$res/initrd.gz" "$kver" || { echo "run.sh: initramfs failed" >&2; exit 1; }
{
	echo "FCACHE_KO=$(abspath "$ko")"
	echo "FCNL=$(abspath "$fcnl")"
	[ -n "$ctl" ] && [ -x "$ctl" ] && echo "FCACHECTL=$(abspath "$ctl")"
	[ -n "$view" ] && [ -x "$view" ] && echo "FCACHE_VIEW=$(abspath "$view")"
	[ -n "$fcached" ] && [ -x "$fcached" ] && echo "FCACHED=$(abspath "$fcached")"
	echo "BENCH_FILES=$bench"
	# the long probes of a guest script (smb.sh's stall probe): not in CI
	echo "VM_LONG=${FCACHE_VM_LONG:-0}"
	echo "GUEST_DIR=$(dirname "$(abspath "$guest")")"
} > "$res/env.sh"
# The guest mounts its own tmpfs on /tmp: what it needs from the host's /tmp
# (a build or source directory there) is named here and kept visible, at the
# same path, by guest/preamble.sh.  Top directories, so that a binary's
# RUNPATH into its build directory resolves too.
guest_keep=
for v in FCACHE_KO FCNL FCACHECTL FCACHE_VIEW FCACHED GUEST_DIR; do
	p=$(sed -n "s/^$v=//p" "$res/env.sh")
	case $p in
	/tmp/?*) top=/tmp/$(echo "${p#/tmp/}" | cut -d/ -f1)
		case " $guest_keep " in *" $top "*) ;; *) guest_keep="$guest_keep $top" ;; esac ;;
	esac
done
echo "GUEST_KEEP='${guest_keep# }'" >> "$res/env.sh"

if [ "$bench" -gt 0 ]; then
	# the benchmark's tree is made here, natively, into an ext4 image:
	# creating 100,000 files inside the TCG guest takes minutes
	/usr/bin/python3 - "$res/benchsrc" "$bench" <<'PY' || exit 1
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
os.mkdir(root)
for d in range((n + 999) // 1000):
    os.mkdir("%s/d%03d" % (root, d))
    for i in range(min(1000, n - d * 1000)):
        with open("%s/d%03d/f%04d" % (root, d, i), "wb") as f:
            f.write(b"x" * 64)
PY
	truncate -s 192M "$res/bench.img"
	mkfs.ext4 -q -F -N $((bench + 1000)) -I 256 -O inline_data \
		-d "$res/benchsrc" "$res/bench.img" || exit 1
	rm -rf "$res/benchsrc"
	echo "BENCH_IMG=$res/bench.img" >> "$res/env.sh"
fi

boot() {
	start=$(date +%s)
	timeout -k 10 "$timeout" "$qemu" -accel tcg,thread=multi -cpu max -m 2048 -smp 2 \
		-nographic -no-reboot -kernel "/boot/vmlinuz-$kver" -initrd "$res/initrd.gz" \
		-append "console=ttyS0 loglevel=5 panic=-1 oops=panic watchdog_thresh=60 rcupdate.rcu_cpu_stall_timeout=300 fcache_test=$(abspath "$guest") fcache_env=$res/env.sh" \
		-fsdev local,id=r,path=/,security_model=none,readonly=on,multidevs=remap \
		-device virtio-9p-pci,fsdev=r,mount_tag=hostroot \
		-fsdev local,id=res,path="$res",security_model=none \
		-device virtio-9p-pci,fsdev=res,mount_tag=results \
		</dev/null >"$res/console.log" 2>&1
	qrc=$?
	secs=$(( $(date +%s) - start ))
}
boot
# A guest kernel that stops by itself before /init runs (seen once: an
# int3 oops in early boot under multi-threaded TCG, Debian's 6.12) ran
# nothing of the module or the tests: booted once more, and said so.  Not
# after the timeout: a boot that hangs is not tried twice.
if [ "$qrc" -ne 124 ] && [ "$qrc" -ne 137 ] &&
   ! grep -q '^fcache-init: started' "$res/console.log" &&
   ! grep -q '^GUEST-DONE' "$res/console.log" && [ ! -f "$res/done" ]; then
	echo "# the guest kernel stopped before /init ran (qemu exit $qrc after $secs s); booting again:"
	grep -aE 'Oops|BUG:|panic|RIP:' "$res/console.log" | head -5 | sed 's/^/#   /'
	boot
fi

n=0 failed=0
echo "# guest kernel $kver"
# the guest copies its TAP lines to the results share at the end; if it
# never got there, take them from the console
[ -f "$res/tap" ] || grep -aE '^(ok|not ok) [0-9]+ ' "$res/console.log" > "$res/tap"
if [ -s "$res/tap" ]; then
	while IFS= read -r line; do
		case $line in
		"ok "*|"not ok "*)
			n=$((n + 1))
			case $line in "not ok "*)
				case $line in *"# TODO"*) ;; *) failed=$((failed + 1)) ;; esac ;;
			esac
			echo "$line" | sed "s/^\(not \)\{0,1\}ok [0-9]*/\1ok $n/" ;;
		"#"*) echo "$line" ;;
		esac
	done < "$res/tap"
fi
report() { # ok|fail description
	n=$((n + 1))
	if [ "$1" = ok ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
}
if grep -q '^GUEST-DONE' "$res/console.log" 2>/dev/null || [ -f "$res/done" ]; then
	report ok "guest ran to the end ($secs s, qemu exit $qrc)"
else
	report fail "guest did not finish (qemu exit $qrc after $secs s)"
fi
if [ -f "$res/dmesg.txt" ]; then
	bad=$(grep -E 'WARNING:|BUG:|Oops|general protection|Call Trace|kmemleak|refcount_t:|UBSAN|KASAN|list_(add|del) corruption|sleeping function called|INFO: task .* blocked|unreferenced object|fcache.*leak' "$res/dmesg.txt")
	if [ -z "$bad" ]; then
		report ok "dmesg has no WARN, BUG, oops or leak report"
	else
		report fail "dmesg shows a kernel problem"
		echo "$bad" | sed 's/^/# /' | head -40
	fi
else
	report fail "guest wrote no dmesg"
fi
[ -f "$res/bench.txt" ] && sed 's/^/# bench: /' "$res/bench.txt"
echo "1..$n"
if [ $failed -gt 0 ] || [ $n -le 2 ]; then
	echo "# ---- console (last 80 lines) ----"
	tail -n 80 "$res/console.log" | sed 's/^/# /'
fi
echo "# $((n - failed)) passed, $failed failed ($secs s in the VM)"
[ $tap = 1 ] && exit 0
[ $failed -eq 0 ]
