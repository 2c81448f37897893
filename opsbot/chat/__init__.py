"""chat: what an operator asks opsbot (intents) and the answers from the store."""
