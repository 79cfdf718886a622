# SPDX-License-Identifier: LGPL-2.1-or-later
# afs-cell.sh (sourced): an authenticated AFS cell inside the guest, the way
# a site runs one: a Kerberos realm (MIT krb5kdc), the cell's key in the
# server KeyFileExt (asetkey from the afs/CELL keytab), OpenAFS 1.8's
# ptserver, vlserver and demand-attach fileserver under bosserver, an admin
# in system:administrators, root.afs and root.cell; then the kernel's AFS
# client (kafs) mounts root.cell and the caller gets a token with kinit and
# aklog-kafs.  All state lives on tmpfs.
#
#   afs_cell_up MOUNTPOINT   ok/notok lines for each step; 0 when usable
AFS_CELL=test.local
AFS_REALM=TEST.LOCAL
AFS_PW=fcache-admin-pw
AFS_ADDR=10.254.0.1

afs_wait() { # SECONDS CMD...: retry CMD (each try bounded) until SECONDS pass
	_end=$(($(date +%s) + $1)); shift
	while [ "$(date +%s)" -lt $_end ]; do
		timeout 20 "$@" >/dev/null 2>&1 && return 0
		sleep 2
	done
	timeout 20 "$@"
}

# the servers' logs, for a step that failed
afs_logs() {
	for f in /var/log/openafs/*Log /var/lib/openafs/logs/*Log; do
		[ -f "$f" ] && tail -n 15 "$f" | sed "s|^|# $(basename $f): |"
	done
}

afs_cell_up() {
	mnt=$1
	mkdir -p /etc/krb5kdc /var/lib/krb5kdc /var/lib/openafs/db \
		/var/lib/openafs/local /var/log/openafs /etc/openafs/server /vicepa "$mnt"
	cat > /etc/krb5.conf <<EOF
[libdefaults]
	default_realm = $AFS_REALM
	dns_lookup_kdc = false
	dns_lookup_realm = false
	rdns = false
	default_ccache_name = FILE:/tmp/krb5cc_%{uid}
[realms]
	$AFS_REALM = {
		kdc = 127.0.0.1
		admin_server = 127.0.0.1
	}
[domain_realm]
	$AFS_CELL = $AFS_REALM
	.$AFS_CELL = $AFS_REALM
EOF
	cat > /etc/krb5kdc/kdc.conf <<EOF
[kdcdefaults]
	kdc_ports = 88
[realms]
	$AFS_REALM = {
		database_name = /var/lib/krb5kdc/principal
		key_stash_file = /etc/krb5kdc/stash
		master_key_type = aes256-cts-hmac-sha1-96
		supported_enctypes = aes256-cts-hmac-sha1-96:normal
	}
EOF
	LAST=$(kdb5_util create -s -r $AFS_REALM -P master-pw 2>&1) &&
		LAST=$(kadmin.local -q "addprinc -pw $AFS_PW admin" 2>&1) &&
		LAST=$(kadmin.local -q "addprinc -randkey afs/$AFS_CELL" 2>&1) &&
		LAST=$(kadmin.local -q "ktadd -k /etc/openafs/server/rxkad.keytab -e aes256-cts-hmac-sha1-96:normal afs/$AFS_CELL" 2>&1) &&
		krb5kdc -P /run/krb5kdc.pid
	check "afs: Kerberos realm $AFS_REALM with afs/$AFS_CELL in a keytab" [ $? = 0 ]

	# ubik and the fileserver ignore loopback addresses: the cell lives on
	# a dummy interface's address
	modprobe dummy
	ip link add afs0 type dummy && ip addr add $AFS_ADDR/24 dev afs0 && ip link set afs0 up
	echo $AFS_ADDR > /var/lib/openafs/local/NetInfo
	# the servers look their own host name up
	echo "$AFS_ADDR $(hostname) afs.$AFS_CELL" >> /etc/hosts
	echo $AFS_CELL > /etc/openafs/server/ThisCell
	printf '>%s #fcache test cell\n%s #afs\n' $AFS_CELL $AFS_ADDR \
		> /etc/openafs/server/CellServDB
	kvno=$(klist -k /etc/openafs/server/rxkad.keytab | awk '$2 ~ /^afs\// { print $1; exit }')
	LAST=$(asetkey add rxkad_krb5 "$kvno" 18 /etc/openafs/server/rxkad.keytab \
		afs/$AFS_CELL@$AFS_REALM 2>&1)
	check "afs: the cell key in KeyFileExt (asetkey, kvno $kvno)" [ $? = 0 ]

	truncate -s 256M /srv/vicepa.img
	mkfs.ext4 -q -F /srv/vicepa.img && mount -o loop /srv/vicepa.img /vicepa
	bosserver
	afs_wait 60 bos status localhost -localauth
	bos create localhost ptserver simple /usr/lib/openafs/ptserver -localauth
	bos create localhost vlserver simple /usr/lib/openafs/vlserver -localauth
	if ! afs_wait 90 pts listentries -localauth; then
		LAST=$(bos status localhost -long -localauth 2>&1)
		notok "afs: ptserver answers"; afs_logs; return 1
	fi
	LAST=$(pts createuser admin -localauth 2>&1; pts adduser admin system:administrators -localauth 2>&1;
	       bos adduser localhost admin -localauth 2>&1)
	check "afs: ptserver answers; admin is in system:administrators" \
		sh -c 'timeout 20 pts membership admin -localauth | grep -q system:administrators'
	# the fileserver registers its addresses with the vlserver when it
	# starts: only once that answers (else the VLDB names a server with no
	# address, and kafs fails every mount with EDESTADDRREQ)
	afs_wait 90 vos listvldb -localauth
	bos create localhost dafs dafs -cmd "/usr/lib/openafs/dafileserver -L" \
		-cmd /usr/lib/openafs/davolserver -cmd /usr/lib/openafs/salvageserver \
		-cmd /usr/lib/openafs/dasalvager -localauth
	afs_wait 90 sh -c "vos listaddrs -noresolve -localauth | grep -qx $AFS_ADDR"
	afs_wait 90 vos listpart localhost -localauth
	# without -maxquota a volume gets 5000 KB, and a write past it aborts
	# with VOVERQUOTA, which 6.1's kafs reports as EDESTADDRREQ (its server
	# rotation replaces the error once no other server is left)
	LAST=$(timeout 60 vos create localhost a root.afs -maxquota 0 -localauth 2>&1 &&
	       timeout 60 vos create localhost a root.cell -maxquota 0 -localauth 2>&1)
	if [ $? != 0 ]; then
		notok "afs: volumes root.afs and root.cell created"; afs_logs; return 1
	fi
	ok "afs: volumes root.afs and root.cell created"

	# kafs asks for the cell's VL servers through the dns_resolver key
	# upcall (request-key runs kafs-dns, which reads /etc/kafs)
	cat > /etc/kafs/client.d/fcache-test.conf <<EOF
[cells]
$AFS_CELL = {
	description = "fcache test cell"
	servers = {
		afs.$AFS_CELL = {
			address = $AFS_ADDR
		}
	}
}
EOF
	modprobe kafs
	echo "add $AFS_CELL $AFS_ADDR" > /proc/fs/afs/cells
	# the first mount may come before kafs has probed the VL server
	# (EDESTADDRREQ): retried
	# (a mount is never killed: a signal in the middle of a probe call has
	# oopsed 6.1's kafs in afs_vlserver_probe_result)
	_end=$(($(date +%s) + 60))
	until mount -t afs "#$AFS_CELL:root.cell." "$mnt" 2>/dev/null ||
	      [ "$(date +%s)" -ge $_end ]; do
		sleep 3
	done
	LAST=$(grep " $mnt " /proc/mounts)
	if ! grep -q " $mnt afs " /proc/mounts; then
		notok "afs: kafs mounts root.cell on $mnt"
		{ cat /proc/fs/afs/cells; cat /proc/fs/afs/$AFS_CELL/vlservers; cat /proc/fs/afs/servers
		  timeout 20 vos listvldb -localauth; timeout 20 vos listaddrs -localauth
		  keyctl show @s; lsmod | grep -E "afs|rxrpc|dns"; dmesg | tail -n 8; } 2>&1 | sed 's/^/# /'
		return 1
	fi
	ok "afs: kafs mounts root.cell on $mnt"

	LAST=$(keyctl session - sh -c "echo no-token > $mnt/.no-token" 2>&1)
	check "afs: without a token writing in root.cell is refused" [ $? != 0 ]
	LAST=$(echo $AFS_PW | kinit admin 2>&1 && aklog-kafs $AFS_CELL $AFS_REALM 2>&1)
	check "afs: kinit admin and aklog-kafs give a token" [ $? = 0 ]
	LAST=$(sh -c "echo token-check > $mnt/.token-check && cat $mnt/.token-check && rm $mnt/.token-check" 2>&1)
	check "afs: with the token the admin writes in root.cell" [ "$LAST" = token-check ]
	[ "$LAST" = token-check ]
}
