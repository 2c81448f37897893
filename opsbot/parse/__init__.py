"""parse: pure functions from raw bundle text to typed facts."""
