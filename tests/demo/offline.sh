# SPDX-License-Identifier: LGPL-2.1-or-later
# offline.sh: the disconnected-operation part of the demo (sourced by run.sh after
# volume.sh, with the volume $vol of the 'server' $srv pinned; uses $top, $demo, $fc,
# $cache and step). The server goes away, work goes on in the pinned subtree, the
# server changes meanwhile, and on reconnection every change arrives: merged where
# both sides edited different lines, kept as a conflict where they collided, and
# the conflict settled with fcache-resolve.
resolve=$top/build/cli/fcache-resolve
printf 'Summary\nstatus: draft\nowner: ana\n' > "$srv/report/summary.txt"
step "$fc" pin recursive "$vol/report"
echo
echo "Disconnected operation: the volume goes offline (as when the network drops, which"
echo "fcached notices from NetworkManager or Server= probes); the pinned subtree stays usable."
step "$fc" disconnect "$vol"
step "$fc" query state "$vol"
sed -i '1s/.*/line 1 of the plan, revised offline/' "$vol/report/plan.txt"
sed -i 's/^status: draft$/status: final (offline)/' "$vol/report/summary.txt"
echo "a note written offline" > "$vol/report/offline-note.txt"
rm "$vol/report/data/part1.bin"
step ls "$vol/report"
step head -n 2 "$vol/report/plan.txt"
echo
echo "Meanwhile someone changes the server: another line of plan.txt, and the same line"
echo "of summary.txt."
sed -i 's/^line 1500 of the plan$/line 1500 of the plan, changed on the server/' "$srv/report/plan.txt"
sed -i 's/^status: draft$/status: in review (server)/' "$srv/report/summary.txt"
step "$fc" query reintegration "$vol"
echo
echo "The server is back: the log replays; plan.txt merges (three-way, libgit2),"
echo "summary.txt is kept as a conflict (the server's version stays until it is settled)."
step "$fc" reconnect "$vol"
step sed -n '1p;1500p' "$srv/report/plan.txt"
step cat "$srv/report/offline-note.txt"
step "$resolve" --cache-dir "$cache" list "$vol"
step "$resolve" --cache-dir "$cache" show "$vol/report/summary.txt"
step "$resolve" --cache-dir "$cache" take local "$vol/report/summary.txt"
step cat "$srv/report/summary.txt"
step "$resolve" --cache-dir "$cache" list "$vol"
