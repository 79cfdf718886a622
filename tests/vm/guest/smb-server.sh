# SPDX-License-Identifier: LGPL-2.1-or-later
# smb-server.sh (sourced by smb.sh): samba's smbd in the guest, everything
# it writes on tmpfs (/run/samba), serving two tmpfs shares over loopback,
# each mounted with mount.cifs over SMB 3.1.1:
#   /mnt/smb     share "lease": oplocks and SMB2 leases granted, so cifs
#                may keep a file's clean pages across opens
#   /mnt/smb-nl  share "nolease": no oplock, no lease, so cifs drops a
#                file's clean pages whenever it is opened
# The SMB user is root, with a password set through smbpasswd.
SMB_PASS=fcache-vm-pass

# smb_conf: the server's configuration (smbd only: no nmbd, no winbind)
smb_conf() {
	cat <<EOF
[global]
	server role = standalone server
	netbios name = FCACHEVM
	workgroup = FCACHE
	interfaces = lo
	bind interfaces only = yes
	smb ports = 445
	disable netbios = yes
	server min protocol = SMB3_11
	passdb backend = tdbsam
	private dir = /run/samba/private
	lock directory = /run/samba/lock
	state directory = /run/samba/state
	cache directory = /run/samba/cache
	pid directory = /run/samba/pid
	ncalrpc dir = /run/samba/ncalrpc
	binddns dir = /run/samba/bind-dns
	usershare path =
	log file = /run/samba/log.%m
	log level = 1
	load printers = no
	printing = bsd
	printcap name = /dev/null
	disable spoolss = yes
	kernel oplocks = no
	smb2 leases = yes
[lease]
	path = /srv/smb/lease
	read only = no
	oplocks = yes
	level2 oplocks = yes
[nolease]
	path = /srv/smb/nolease
	read only = no
	oplocks = no
	level2 oplocks = no
EOF
}

# smb_mount SHARE DIR [OPTIONS]: mount.cifs //127.0.0.1/SHARE on DIR
smb_mount() {
	mkdir -p "$2"
	mount -t cifs "//127.0.0.1/$1" "$2" \
		-o "vers=3.1.1,username=root,password=$SMB_PASS,cache=strict,actimeo=1${3:+,$3}"
}

# setup_smb: start smbd and mount both shares; diag lines say what failed
setup_smb() {
	mkdir -p /run/samba/private /run/samba/lock /run/samba/state /run/samba/cache \
		/run/samba/pid /run/samba/ncalrpc /run/samba/bind-dns \
		/srv/smb/lease /srv/smb/nolease
	chmod 1777 /srv/smb/lease /srv/smb/nolease
	smb_conf > /run/samba/smb.conf
	ip link set lo up
	printf '%s\n%s\n' "$SMB_PASS" "$SMB_PASS" |
		smbpasswd -c /run/samba/smb.conf -s -a root > /dev/null ||
		diag "smbpasswd -a root failed"
	smbd -D -s /run/samba/smb.conf || diag "smbd did not start"
	# smbd listens a moment after it forks
	for _i in $(seq 1 100); do
		grep -q ':01BD ' /proc/net/tcp /proc/net/tcp6 2>/dev/null && break
		sleep 0.2
	done
	modprobe cifs
	smb_mount lease /mnt/smb || diag "mount.cifs of //127.0.0.1/lease failed"
	smb_mount nolease /mnt/smb-nl || diag "mount.cifs of //127.0.0.1/nolease failed"
	grep ' cifs ' /proc/mounts | sed 's/password=[^,]*/password=*/' |
		while IFS= read -r l; do diag "mounted: $l"; done
}

# stop_smb: unmount both shares and stop smbd (it may hold nothing after)
stop_smb() {
	umount /mnt/smb-nl 2>/dev/null
	umount /mnt/smb
	_r=$?
	kill "$(cat /run/samba/pid/smbd.pid 2>/dev/null)" 2>/dev/null
	return $_r
}
