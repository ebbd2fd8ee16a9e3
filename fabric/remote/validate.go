package remote

// Validate checks cfg as New would, without opening anything: for a
// daemon that checks its configuration before it starts.
func (cfg Config) Validate() error {
	_, err := cfg.validate()
	return err
}
