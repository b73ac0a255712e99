#!/usr/bin/env bash
# install-takeover.sh PREFIX: run by `make install` once the new build is in
# PREFIX/bin. A Portcullis daemon running the program just replaced there is
# stopped at the person's terminal, so that the new version takes over: the
# shims of the agents connected stay, answer what was in flight, and at the
# agent's next call start the new daemon and go on (docs/AGENTS.md). A daemon
# running another installation's program is left alone.
set -u
bin="$1/bin"
pid=$("$bin/portcullis" status --json 2>/dev/null | sed -n 's/^  "pid": \([0-9][0-9]*\),\{0,1\}$/\1/p')
[[ -n "$pid" ]] || exit 0
exe=$(readlink "/proc/$pid/exe" 2>/dev/null || ps -o comm= -p "$pid" 2>/dev/null)
exe=${exe% (deleted)}
if [[ "$exe" != "$bin/portcullis-app" ]]; then
	echo "note: the Portcullis daemon running (pid $pid) is ${exe:-unknown}, not this installation: left alone"
	exit 0
fi
if "$bin/portcullis" stop; then
	echo "stopped the daemon of the previous version (pid $pid): connected agents go on with the new version at their next call"
else
	echo "note: the daemon of the previous version (pid $pid) still runs; run \`portcullis stop\` at your terminal to let the new one take over (connected agents go on by themselves)"
fi
