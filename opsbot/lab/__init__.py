"""lab: systemd-nspawn nodes running the SGLang emulator, for tests and training."""
