"""slack: slash commands and approval buttons (slack-bolt)."""
