//go:build !darwin

package config

// ManagedFile is where an organisation places the managed policy
// (docs/TEAMS.md).
const ManagedFile = "/etc/portcullis/managed.json"
