"""slack (stages: trigger and render): slash commands and approval buttons (slack-bolt)."""
