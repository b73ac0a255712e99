#!/usr/bin/env bash
# with-secret-service.sh runs a command with a real, unlocked, throwaway Secret
# Service on a private D-Bus session bus, so that the tests of the Linux
# credential store talk to gnome-keyring instead of skipping:
#
#   scripts/with-secret-service.sh go test ./platform/...
#
# or, to give each test binary a keyring of its own (make test does this):
#
#   go test -exec "$PWD/scripts/with-secret-service.sh" ./...
#
# It starts dbus-run-session with fresh, temporary XDG_DATA_HOME and
# XDG_RUNTIME_DIR (the keyring is thrown away afterwards), starts gnome-keyring's
# secrets component unlocked with a throwaway password read from stdin, exports
# PORTCULLIS_TEST_KEYRING_PASSWORD (that password: the tests use it to unlock the
# collection after locking it), and runs the command inside. The command's exit
# status is returned.
#
# A session bus that already exists is never used: the tests write items and lock
# the default collection, which must not happen to a person's own keyring.
#
# It runs the command unchanged, with a note on stderr, when there is nothing to
# set up or nothing to set it up with: not Linux, or dbus-run-session /
# gnome-keyring-daemon missing (scripts/test-deps.sh installs them on Debian). The
# keyring tests then skip and say why.
set -euo pipefail

note() { printf 'with-secret-service: %s\n' "$*" >&2; }

(($# > 0)) || {
	note "usage: $0 COMMAND [ARGS...]"
	exit 2
}

password=portcullis-test

if [[ "${1:-}" == --inside ]]; then
	# Second stage, inside the private bus: start and unlock the keyring, then run.
	shift
	if ! printf '%s' "$password" | gnome-keyring-daemon --unlock --components=secrets >/dev/null; then
		note "gnome-keyring-daemon failed to start: running without a Secret Service"
		unset DBUS_SESSION_BUS_ADDRESS
		exec "$@"
	fi
	# Wait (bounded, 5 s) until the daemon owns org.freedesktop.secrets. Asking the
	# bus (NameHasOwner), not the name itself, so that the bus does not activate a
	# second daemon meanwhile.
	ready=false
	for _ in $(seq 1 50); do
		if dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
			org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null |
			grep -q 'boolean true'; then
			ready=true
			break
		fi
		sleep 0.1
	done
	if ! $ready; then
		note "the Secret Service did not answer within 5s: running without it"
		unset DBUS_SESSION_BUS_ADDRESS
		exec "$@"
	fi
	# The daemon detaches; ask the bus for its pid so that it can be stopped.
	pid="$(dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
		org.freedesktop.DBus.GetConnectionUnixProcessID string:org.freedesktop.secrets 2>/dev/null |
		sed -n 's/^ *uint32 \([0-9][0-9]*\)$/\1/p')"
	note "Secret Service ready on a private session bus (gnome-keyring-daemon pid ${pid:-unknown})"
	export PORTCULLIS_TEST_KEYRING_PASSWORD="$password"
	status=0
	"$@" || status=$?
	if [[ -n "$pid" ]]; then
		kill "$pid" 2>/dev/null || true
	fi
	exit "$status"
fi

if [[ "$(uname -s)" != Linux ]]; then
	exec "$@"
fi
for tool in dbus-run-session dbus-send gnome-keyring-daemon; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		note "$tool not found: running without a Secret Service (keyring tests will skip)"
		exec "$@"
	fi
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-keyring.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/data" "$tmp/runtime"
chmod 700 "$tmp/runtime"
status=0
XDG_DATA_HOME="$tmp/data" XDG_RUNTIME_DIR="$tmp/runtime" \
	dbus-run-session -- "$0" --inside "$@" || status=$?
exit "$status"
