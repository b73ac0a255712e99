#!/usr/bin/env bash
# with-secret-service.sh runs a command with a real, unlocked Secret Service on a
# private D-Bus session bus, so that tests of the Linux credential store talk to
# gnome-keyring instead of skipping:
#
#   scripts/with-secret-service.sh go test ./...
#
# It starts dbus-run-session with fresh, temporary XDG_DATA_HOME and XDG_RUNTIME_DIR
# (the keyring is thrown away afterwards), unlocks gnome-keyring's secrets component
# with a throwaway password, and runs the command inside. The command's exit status
# is returned.
#
# It runs the command unchanged, with a note on stderr, when there is nothing to set
# up or nothing to set it up with: not Linux, a session bus already present
# (DBUS_SESSION_BUS_ADDRESS set), or dbus-run-session / gnome-keyring-daemon missing
# (scripts/test-deps.sh installs them on Debian).
set -euo pipefail

note() { printf 'with-secret-service: %s\n' "$*" >&2; }

(($# > 0)) || {
	note "usage: $0 COMMAND [ARGS...]"
	exit 2
}

if [[ "${1:-}" == --inside ]]; then
	# Second stage, inside the private bus: start and unlock the keyring, then run.
	shift
	# gnome-keyring-daemon prints environment assignments (GNOME_KEYRING_CONTROL=…);
	# export them for the command.
	if ! keyring_env="$(printf 'portcullis-test\n' | gnome-keyring-daemon --unlock --components=secrets)"; then
		note "gnome-keyring-daemon failed to start: running without a Secret Service"
		exec "$@"
	fi
	while IFS= read -r line; do
		[[ "$line" == *=* ]] && export "${line?}"
	done <<<"$keyring_env"
	# Wait (bounded) until org.freedesktop.secrets answers on the bus.
	for _ in $(seq 1 50); do
		if dbus-send --session --print-reply --dest=org.freedesktop.secrets /org/freedesktop/secrets \
			org.freedesktop.DBus.Peer.Ping >/dev/null 2>&1; then
			break
		fi
		sleep 0.1
	done
	note "Secret Service ready on a private session bus"
	status=0
	"$@" || status=$?
	# Stop the keyring daemon this session started, by its pid.
	pid="$(printf '%s\n' "$keyring_env" | sed -n 's/^GNOME_KEYRING_PID=//p')"
	if [[ -n "$pid" ]]; then
		kill "$pid" 2>/dev/null || true
	fi
	exit "$status"
fi

if [[ "$(uname -s)" != Linux ]]; then
	exec "$@"
fi
if [[ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ]]; then
	note "using the existing session bus"
	exec "$@"
fi
for tool in dbus-run-session gnome-keyring-daemon; do
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
