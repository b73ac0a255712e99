package config

// ManagedFile is where an organisation places the managed policy
// (docs/TEAMS.md), as device management tools place such files.
const ManagedFile = "/Library/Application Support/Portcullis/managed.json"
