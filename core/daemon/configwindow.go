package daemon

import (
	"github.com/portcullis/portcullis/core/config"
)

// ConfigState returns the configuration in force, with its digest, for an
// edit made in another process of the app (the window process, whose
// Preferences edit through EditConfigFrom).
func (d *Daemon) ConfigState() ConfigState { return d.configState() }

// EditConfigFrom puts edited (the JSON of a whole configuration, made from
// the one named by base, a ConfigState digest) in force as
// EditConfigFromWindow does, after a press judged as in: refused when
// another edit was saved since base, when a change from outside waits for
// confirmation, or when it widens trust and in does not come from the
// person's device. by says who made it, for the audit log.
func (d *Daemon) EditConfigFrom(by, base string, edited []byte, in WindowInput) (*config.Config, error) {
	cfg, err := config.Parse(edited, "the edited configuration")
	if err != nil {
		return nil, err
	}
	return d.editFromWindow(by, base, func(c *config.Config) error { *c = *cfg; return nil }, in)
}
