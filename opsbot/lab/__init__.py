"""lab (a test stand, no stage): systemd-nspawn nodes running the SGLang emulator, for tests and training."""
