package daemon

import (
	"github.com/portcullis/portcullis/core/config"
)

// The managed policy (docs/TEAMS.md): floors an organisation sets in a
// root-owned file that the person's configuration cannot go below. The
// daemon raises every configuration it reads to them before anything else
// looks at it (holdWidening, putInForce), so the configuration in force is
// never below a floor, whatever config.json says; the person's own tools
// (EditConfig) refuse an edit that goes below one, with the reason.

// ManagedStatus is the managed policy as the daemon follows it, for
// `portcullis status` and Preferences.
type ManagedStatus struct {
	// File is the managed policy's path (config.ManagedFile).
	File string `json:"file"`
	// Floors lists the floors in force, in words; empty when no policy is
	// in force.
	Floors []string `json:"floors,omitempty"`
	// Policy is the policy in force (the file's, or config.Lockdown while
	// it is malformed).
	Policy *config.Managed `json:"policy,omitempty"`
	// Overridden lists what config.json says that is below a floor: the
	// floor is in force instead.
	Overridden []config.Floor `json:"overridden,omitempty"`
	// Ignored says why a managed policy file that exists sets no floor.
	Ignored string `json:"ignored,omitempty"`
	// Error says why the managed policy file does not parse; config.Lockdown
	// is in force meanwhile.
	Error string `json:"error,omitempty"`
}

// readManaged reads the managed policy file (Options.ReadManaged in tests).
func (o Options) readManaged() config.ManagedState {
	if o.ReadManaged != nil {
		return o.ReadManaged()
	}
	return config.ReadManaged()
}

// floorConfig raises cfg, parsed from data, to the floors of m: the
// configuration and its bytes (marshalled again when a floor changed it),
// and what was raised. data nil (no file) stays nil.
func floorConfig(m config.ManagedState, cfg *config.Config, data []byte) (*config.Config, []byte, []config.Floor) {
	if cfg == nil || m.Policy == nil {
		return cfg, data, nil
	}
	out, floors := m.Apply(cfg)
	if len(floors) == 0 {
		return cfg, data, nil
	}
	if data != nil {
		b, err := config.Marshal(out)
		if err != nil {
			// Not expected for a configuration that validated; the
			// floors are in force all the same.
			return out, data, floors
		}
		data = b
	}
	return out, data, floors
}

// refreshManaged reads the managed policy file again and keeps it; it
// returns the state now in force. loadMu is held.
func (d *Daemon) refreshManaged() config.ManagedState {
	m := d.opts.readManaged()
	d.mu.Lock()
	old := d.managed
	d.managed = m
	d.mu.Unlock()
	if !old.Same(m) {
		d.log.Info("the managed policy changed", "file", m.File, "floors", m.Policy.Summary())
	}
	if old.Ignored != m.Ignored && m.Ignored != "" {
		d.log.Warn("the managed policy file is not trusted and sets no floor", "file", m.File, "why", m.Ignored)
	}
	if old.Error != m.Error && m.Error != "" {
		d.log.Error("the managed policy file is malformed: every tool asks and approvals need the system's authentication until it is fixed", "file", m.File, "err", m.Error)
	}
	return m
}

// managedStatus answers for status.
func (d *Daemon) managedStatus() *ManagedStatus {
	d.mu.Lock()
	m, over := d.managed, d.overridden
	d.mu.Unlock()
	if m.Policy == nil && m.Ignored == "" && m.Error == "" {
		return nil
	}
	st := &ManagedStatus{File: m.File, Ignored: m.Ignored, Error: m.Error, Policy: m.Policy, Floors: m.Policy.Summary()}
	for _, f := range over {
		if f.Lowered {
			st.Overridden = append(st.Overridden, f)
		}
	}
	return st
}
